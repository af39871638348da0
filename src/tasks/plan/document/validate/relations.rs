//! The checks between items: unique ids, disjoint scopes, dependencies without cycles.

use std::collections::{HashMap, VecDeque};

use super::{Draft, Kind, PlanErrors};
use crate::tasks::plan::document::ItemId;
use crate::tasks::plan::glob::{Budget, Exhausted};

/// The valid ids and the item each names (the first that has it); later items with the same id are refused.
pub(super) fn unique_ids(drafts: &mut [Draft], errors: &mut PlanErrors) -> HashMap<ItemId, usize> {
    let mut ids: HashMap<ItemId, usize> = HashMap::new();
    for draft in drafts.iter_mut() {
        let Some(id) = &draft.id else { continue };
        if let Some(first) = ids.get(id) {
            errors.push(
                Kind::DuplicateId,
                format!(
                    "{}: id {:?} is already used by items[{first}]",
                    draft.label,
                    id.as_str()
                ),
            );
            draft.duplicate = true;
        } else {
            ids.insert(id.clone(), draft.index);
        }
    }
    ids
}

/// `items "api" and "web"`; by position (`items[0] and items[2] "web"`) when an id is not valid.
fn pair(a: &Draft, b: &Draft) -> String {
    match (&a.id, &b.id) {
        (Some(x), Some(y)) => format!("items {:?} and {:?}", x.as_str(), y.as_str()),
        _ => format!("{} and {}", a.label, b.label),
    }
}

/// How much product-search work the overlap check of one plan may do (see `glob::Budget`): a realistic plan
/// of 20 items with 5 globs each, many of them overlapping, takes about 160 000 units; a hostile one could take
/// minutes without a bound.
pub(super) const OVERLAP_WORK: u64 = 4_000_000;

/// Every pair of globs of two different items that some path matches, with that path. When comparing them all
/// would take more than [`OVERLAP_WORK`], the plan is refused for that instead.
pub(super) fn overlaps(drafts: &[Draft], errors: &mut PlanErrors) {
    let mut budget = Budget::new(OVERLAP_WORK);
    for (i, a) in drafts.iter().enumerate() {
        for b in &drafts[i + 1..] {
            for ga in &a.globs {
                for gb in &b.globs {
                    match ga.overlap_witness_within(gb, &mut budget) {
                        Ok(None) => {}
                        Ok(Some(path)) => errors.push(
                            Kind::Overlap,
                            format!(
                                "{} overlap: {:?} and {:?} both match {:?}",
                                pair(a, b),
                                ga.as_str(),
                                gb.as_str(),
                                path
                            ),
                        ),
                        Err(Exhausted) => {
                            errors.push(
                                Kind::Scope,
                                format!(
                                    "the scopes are too many or too intricate to check for overlap: the check stopped at {} ({:?} against {:?}); use fewer scope entries and simpler globs, such as one directory (src/api/**) rather than many files or many *",
                                    pair(a, b),
                                    ga.as_str(),
                                    gb.as_str()
                                ),
                            );
                            return;
                        }
                    }
                }
            }
        }
    }
}

/// One cycle per group of items that depend on each other, in order (`a -> b` reads "a depends on b"), starting
/// from the group's first item in the file.
pub(super) fn cycles(drafts: &[Draft], ids: &HashMap<ItemId, usize>, errors: &mut PlanErrors) {
    let edges: Vec<Vec<usize>> = drafts
        .iter()
        .map(|d| {
            if d.duplicate {
                return Vec::new();
            }
            let wanted = d
                .wanted
                .iter()
                .filter_map(|(_, w)| w.parse::<ItemId>().ok());
            wanted
                .filter_map(|id| ids.get(&id).copied())
                .filter(|&to| to != d.index)
                .collect()
        })
        .collect();
    let reach: Vec<Vec<bool>> = (0..drafts.len())
        .map(|from| reachable(&edges, from))
        .collect();
    let mut reported = vec![false; drafts.len()];
    for start in 0..drafts.len() {
        if reported[start] || !reach[start][start] {
            continue;
        }
        let group: Vec<bool> = (0..drafts.len())
            .map(|j| reach[start][j] && reach[j][start])
            .collect();
        for (j, in_group) in group.iter().enumerate() {
            reported[j] |= *in_group;
        }
        let cycle = shortest_cycle(&edges, &group, start);
        let names: Vec<&str> = cycle
            .iter()
            .filter_map(|&i| drafts[i].id.as_ref().map(ItemId::as_str))
            .collect();
        errors.push(
            Kind::Cycle,
            format!("depends_on cycle: {}", names.join(" -> ")),
        );
    }
}

/// Which items can be reached from `from` in one or more steps.
fn reachable(edges: &[Vec<usize>], from: usize) -> Vec<bool> {
    let mut seen = vec![false; edges.len()];
    let mut stack: Vec<usize> = edges[from].clone();
    while let Some(i) = stack.pop() {
        if !std::mem::replace(&mut seen[i], true) {
            stack.extend(&edges[i]);
        }
    }
    seen
}

/// The shortest way from `start` back to itself inside `group`, as `[start, …, start]`.
fn shortest_cycle(edges: &[Vec<usize>], group: &[bool], start: usize) -> Vec<usize> {
    let mut parent: Vec<Option<usize>> = vec![None; edges.len()];
    let mut queue = VecDeque::from([start]);
    while let Some(i) = queue.pop_front() {
        for &next in &edges[i] {
            if next == start {
                // Walked backwards from the closing step: the parents lead from `i` back to `start`.
                let mut cycle = vec![start, i];
                let mut at = i;
                while let Some(p) = parent[at] {
                    cycle.push(p);
                    at = p;
                }
                cycle.reverse();
                return cycle;
            }
            if group[next] && parent[next].is_none() && next != start {
                parent[next] = Some(i);
                queue.push_back(next);
            }
        }
    }
    vec![start, start]
}
