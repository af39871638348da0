//! The one engine behind [`Glob::matches`](super::Glob::matches) and [`Glob::overlaps`](super::Glob::overlaps):
//! a small nondeterministic automaton over characters whose edges carry character *sets*. Matching runs it on a
//! path; overlap explores the product of two automata, stepping both at once along edges whose sets intersect
//! ([`Nfa::steps`]). Both read the same states and the same sets, so "a path matches both" and "the globs
//! overlap" cannot disagree.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

const MAX_SCALAR: u32 = 0x10_FFFF;
const SLASH: u32 = '/' as u32;
/// Every scalar value: the surrogate gap is not one.
const SCALARS: [(u32, u32); 2] = [(0, 0xD7FF), (0xE000, MAX_SCALAR)];

/// A set of characters: sorted, disjoint, non-adjacent inclusive ranges of Unicode scalar values (never a
/// surrogate, so every member is a `char`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct CharSet(Vec<(u32, u32)>);

impl CharSet {
    pub(super) fn single(c: char) -> Self {
        CharSet(vec![(c as u32, c as u32)])
    }

    /// Every character, `/` included: what lies beneath a matched directory.
    pub(super) fn any() -> Self {
        CharSet(SCALARS.to_vec())
    }

    /// Every character but `/`: what `*` and `?` stand for.
    pub(super) fn any_but_slash() -> Self {
        CharSet(vec![
            (0, SLASH - 1),
            (SLASH + 1, 0xD7FF),
            (0xE000, MAX_SCALAR),
        ])
    }

    pub(super) fn slash() -> Self {
        CharSet(vec![(SLASH, SLASH)])
    }

    /// A bracket class: its ranges, or everything else when negated; `/` is never a member either way, because a
    /// class stands for one character of a segment.
    pub(super) fn class(ranges: &[(char, char)], negated: bool) -> Self {
        let mut sorted: Vec<(u32, u32)> = ranges
            .iter()
            .map(|&(lo, hi)| (lo as u32, hi as u32))
            .collect();
        sorted.sort_unstable();
        let mut listed: Vec<(u32, u32)> = Vec::with_capacity(sorted.len());
        for (lo, hi) in sorted {
            match listed.last_mut() {
                Some(last) if lo <= last.1.saturating_add(1) => last.1 = last.1.max(hi),
                _ => listed.push((lo, hi)),
            }
        }
        let listed = CharSet(listed);
        let set = if negated { listed.complement() } else { listed };
        set.intersect(&CharSet::any_but_slash())
    }

    fn complement(&self) -> Self {
        let mut gaps = Vec::with_capacity(self.0.len() + 1);
        let mut next = 0u32;
        for &(lo, hi) in &self.0 {
            if lo > next {
                gaps.push((next, lo - 1));
            }
            next = hi.saturating_add(1);
        }
        if next <= MAX_SCALAR {
            gaps.push((next, MAX_SCALAR));
        }
        CharSet(gaps).intersect(&CharSet::any())
    }

    fn intersect(&self, other: &CharSet) -> CharSet {
        let mut out = Vec::new();
        meet(&self.0, &other.0, |lo, hi| out.push((lo, hi)));
        CharSet(out)
    }

    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    fn contains(&self, c: char) -> bool {
        let c = c as u32;
        // Sets hold a handful of ranges; a binary search would not pay for itself.
        self.0.iter().any(|&(lo, hi)| lo <= c && c <= hi)
    }
}

/// Calls `each` with every range of the intersection of two normalized range lists, in order.
fn meet(a: &[(u32, u32)], b: &[(u32, u32)], mut each: impl FnMut(u32, u32)) {
    let (mut i, mut j) = (0, 0);
    while i < a.len() && j < b.len() {
        let ((a_lo, a_hi), (b_lo, b_hi)) = (a[i], b[j]);
        let (lo, hi) = (a_lo.max(b_lo), a_hi.min(b_hi));
        if lo <= hi {
            each(lo, hi);
        }
        if a_hi < b_hi {
            i += 1;
        } else {
            j += 1;
        }
    }
}

/// Where a witness looks first for a character, so it reads like a path: lower-case letters, digits, upper-case
/// letters, `_`, `-`, `.`, then other visible ASCII, then anything but a control or space, then anything at all.
const PREFERRED: [(u32, u32); 9] = [
    ('a' as u32, 'z' as u32),
    ('0' as u32, '9' as u32),
    ('A' as u32, 'Z' as u32),
    ('_' as u32, '_' as u32),
    ('-' as u32, '-' as u32),
    ('.' as u32, '.' as u32),
    ('!' as u32, '~' as u32),
    (0xA0, MAX_SCALAR),
    (0, MAX_SCALAR),
];

/// What one step of the product can read: the most readable character other than `/` both sets hold, and
/// whether both hold `/`. Nothing is allocated: this runs for every pair of edges the product explores.
fn shared(a: &CharSet, b: &CharSet) -> (Option<char>, bool) {
    let mut ranges = [(0u32, 0u32); 8];
    let mut count = 0;
    let mut overflow = false;
    meet(&a.0, &b.0, |lo, hi| {
        if count < ranges.len() {
            ranges[count] = (lo, hi);
            count += 1;
        } else {
            overflow = true;
        }
    });
    if overflow {
        // Only classes listing many separate characters get here; they are rare enough to allocate for.
        return shared_in(&a.intersect(b).0);
    }
    shared_in(&ranges[..count])
}

fn shared_in(ranges: &[(u32, u32)]) -> (Option<char>, bool) {
    let slash = ranges.iter().any(|&(lo, hi)| lo <= SLASH && SLASH <= hi);
    let pick = PREFERRED.iter().find_map(|&(p_lo, p_hi)| {
        ranges.iter().find_map(|&(lo, hi)| {
            // The first member of `[lo, hi] ∩ [p_lo, p_hi]` that is neither `/` nor a control character, unless
            // only control characters are left (the last, catch-all preference).
            let mut c = lo.max(p_lo);
            let end = hi.min(p_hi);
            while c <= end {
                match char::from_u32(c) {
                    Some('/') => {}
                    Some(ch) if !ch.is_control() || p_lo == 0 => return Some(ch),
                    _ => {}
                }
                c += 1;
                // Past the C0 and C1 controls and `/` nothing is skipped, so this loop ends within ~70 steps.
            }
            None
        })
    });
    (pick, slash)
}

/// An index into [`Nfa::states`]; `u32` keeps the product tables small.
pub(super) type StateId = u32;

#[derive(Clone, Debug, Default)]
struct State {
    edges: Vec<(CharSet, StateId)>,
    accepting: bool,
}

/// Builds an [`Nfa`] with epsilon edges, which [`Builder::finish`] removes.
#[derive(Debug)]
pub(super) struct Builder {
    states: Vec<State>,
    epsilons: Vec<Vec<StateId>>,
}

impl Builder {
    pub(super) const START: StateId = 0;

    pub(super) fn new() -> Self {
        Builder {
            states: vec![State::default()],
            epsilons: vec![Vec::new()],
        }
    }

    pub(super) fn add_state(&mut self) -> StateId {
        self.states.push(State::default());
        self.epsilons.push(Vec::new());
        // A glob is at most 300 characters and adds at most two states per character.
        StateId::try_from(self.states.len() - 1).unwrap_or(StateId::MAX)
    }

    pub(super) fn edge(&mut self, from: StateId, set: CharSet, to: StateId) {
        self.states[from as usize].edges.push((set, to));
    }

    pub(super) fn epsilon(&mut self, from: StateId, to: StateId) {
        self.epsilons[from as usize].push(to);
    }

    pub(super) fn accept(&mut self, state: StateId) {
        self.states[state as usize].accepting = true;
    }

    /// Replaces epsilon edges by copies of what they lead to, then drops the states nothing reaches, so matching
    /// and the product never follow an epsilon and the product has fewer pairs.
    pub(super) fn finish(self) -> Nfa {
        // Most states have no epsilon edge: their closure is themselves. The others share one `seen` table,
        // reset after each use, so building stays linear in practice rather than quadratic in the state count.
        let mut seen = vec![false; self.states.len()];
        let mut closure = |from: usize| -> Vec<usize> {
            if self.epsilons[from].is_empty() {
                return vec![from];
            }
            let mut stack = vec![from];
            let mut found = Vec::new();
            while let Some(s) = stack.pop() {
                if !std::mem::replace(&mut seen[s], true) {
                    found.push(s);
                    stack.extend(self.epsilons[s].iter().map(|&t| t as usize));
                }
            }
            for &s in &found {
                seen[s] = false;
            }
            found
        };
        let mut closed: Vec<State> = (0..self.states.len())
            .map(|s| {
                let mut state = State::default();
                for t in closure(s) {
                    state.accepting |= self.states[t].accepting;
                    for edge in &self.states[t].edges {
                        if !state.edges.contains(edge) {
                            state.edges.push(edge.clone());
                        }
                    }
                }
                state
            })
            .collect();
        // Renumber the reachable states in discovery order; the start stays 0.
        let mut renumbered: Vec<Option<StateId>> = vec![None; closed.len()];
        let mut order = vec![0usize];
        renumbered[0] = Some(0);
        let mut next = 0;
        while let Some(&s) = order.get(next) {
            next += 1;
            for (_, to) in &closed[s].edges {
                if renumbered[*to as usize].is_none() {
                    renumbered[*to as usize] = StateId::try_from(order.len()).ok();
                    order.push(*to as usize);
                }
            }
        }
        let states: Vec<State> = order
            .iter()
            .map(|&s| {
                // Each reachable state is taken once, in its new position.
                let state = std::mem::take(&mut closed[s]);
                State {
                    accepting: state.accepting,
                    edges: state
                        .edges
                        .into_iter()
                        .filter_map(|(set, to)| Some((set, renumbered[to as usize]?)))
                        .collect(),
                }
            })
            .collect();
        let remaining = remaining(&states);
        let mut nfa = Nfa {
            states,
            remaining,
            prefix: String::new(),
        };
        nfa.prefix = nfa.literal_prefix();
        nfa
    }
}

/// For each state, the fewest characters that lead from it to acceptance ([`DEAD`] when none do): a breadth-first
/// search backwards from the accepting states.
fn remaining(states: &[State]) -> Vec<u32> {
    let mut incoming: Vec<Vec<usize>> = vec![Vec::new(); states.len()];
    for (from, state) in states.iter().enumerate() {
        for (_, to) in &state.edges {
            incoming[*to as usize].push(from);
        }
    }
    let mut distance = vec![DEAD; states.len()];
    let mut queue = std::collections::VecDeque::new();
    for (s, state) in states.iter().enumerate() {
        if state.accepting {
            distance[s] = 0;
            queue.push_back(s);
        }
    }
    while let Some(s) = queue.pop_front() {
        for &from in &incoming[s] {
            if distance[from] == DEAD {
                distance[from] = distance[s] + 1;
                queue.push_back(from);
            }
        }
    }
    distance
}

/// The distance to acceptance of a state from which nothing is accepted.
const DEAD: u32 = u32::MAX;

/// The automaton of one glob, without epsilon edges. State 0 is the start.
#[derive(Clone, Debug)]
pub(super) struct Nfa {
    states: Vec<State>,
    /// Per state, the fewest characters to acceptance (see [`remaining`]): prunes dead pairs from the product and
    /// guides the witness search.
    remaining: Vec<u32>,
    /// What every accepted string starts with (see [`Nfa::literal_prefix`]).
    prefix: String,
}

/// Work allowed to product searches, shared by many comparisons: one unit per pair of edges examined, and one per
/// comparison. Comparing the scopes of a whole plan is many comparisons, and a hostile planner could make each
/// one as costly as the product allows; a budget bounds the total.
#[derive(Debug)]
pub(crate) struct Budget {
    left: u64,
}

/// A product search stopped because its [`Budget`] ran out; its answer is unknown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Exhausted;

impl Budget {
    pub(crate) fn new(units: u64) -> Self {
        Budget { left: units }
    }

    /// For single comparisons: a few hundred states per glob bound one comparison already.
    pub(super) fn unlimited() -> Self {
        Budget::new(u64::MAX)
    }

    fn spend(&mut self, units: u64) -> Result<(), Exhausted> {
        match self.left.checked_sub(units) {
            Some(left) => {
                self.left = left;
                Ok(())
            }
            None => {
                self.left = 0;
                Err(Exhausted)
            }
        }
    }

    /// Charges for visiting the pair `(a, b)`: the pairs of edges [`Nfa::steps`] will examine.
    fn visit(&mut self, x: &Nfa, y: &Nfa, a: StateId, b: StateId) -> Result<(), Exhausted> {
        let pairs = x.states[a as usize].edges.len() * y.states[b as usize].edges.len();
        self.spend(u64::try_from(pairs.max(1)).unwrap_or(u64::MAX))
    }
}

/// An overlap witness that goes through a segment start that is empty (`a//b`, a trailing `/`) or begins with `.`
/// costs this much more than one character, so the witness shown is an ordinary path whenever one exists:
/// `src/web/a.ts` rather than `src/web/.ts`.
const ODD_PATH_COST: u32 = 1_000;

impl Nfa {
    const START: StateId = 0;

    #[cfg(test)]
    pub(super) fn state_count(&self) -> usize {
        self.states.len()
    }

    /// Whether the automaton accepts `path`, running every state at once.
    pub(super) fn matches(&self, path: &str) -> bool {
        let mut seen = vec![false; self.states.len()];
        let mut current = vec![Self::START];
        let mut next = Vec::new();
        for c in path.chars() {
            seen.fill(false);
            next.clear();
            for &s in &current {
                for (set, to) in &self.states[s as usize].edges {
                    if set.contains(c) && !std::mem::replace(&mut seen[*to as usize], true) {
                        next.push(*to);
                    }
                }
            }
            if next.is_empty() {
                return false;
            }
            std::mem::swap(&mut current, &mut next);
        }
        current.iter().any(|&s| self.states[s as usize].accepting)
    }

    /// The characters every accepted string starts with: the chain of single-character edges out of the start.
    /// Two globs whose prefixes disagree cannot overlap, which settles most pairs of real scopes at once.
    fn literal_prefix(&self) -> String {
        let mut prefix = String::new();
        let mut s = Self::START;
        // Bounded by the state count: each step moves along the one edge of a state.
        for _ in 0..self.states.len() {
            let state = &self.states[s as usize];
            let [(set, to)] = state.edges.as_slice() else {
                break;
            };
            let [(lo, hi)] = set.0.as_slice() else { break };
            let Some(c) = char::from_u32(*lo).filter(|_| lo == hi && !state.accepting) else {
                break;
            };
            prefix.push(c);
            s = *to;
        }
        prefix
    }

    fn prefixes_agree(&self, other: &Nfa) -> bool {
        let (a, b) = (&self.prefix, &other.prefix);
        a.starts_with(b.as_str()) || b.starts_with(a.as_str())
    }

    /// The product's steps out of the pair `(a, b)`: for each pair of edges whose sets intersect, the pair of
    /// targets, the character a witness reads there (other than `/`, if any), and whether `/` may be read.
    /// The single definition of "both automata can read the same character".
    fn steps(
        &self,
        other: &Nfa,
        a: StateId,
        b: StateId,
        mut each: impl FnMut(StateId, StateId, Option<char>, bool),
    ) {
        for (set_a, to_a) in &self.states[a as usize].edges {
            for (set_b, to_b) in &other.states[b as usize].edges {
                let (c, slash) = shared(set_a, set_b);
                if c.is_some() || slash {
                    each(*to_a, *to_b, c, slash);
                }
            }
        }
    }

    fn both_accept(&self, other: &Nfa, a: StateId, b: StateId) -> bool {
        self.states[a as usize].accepting && other.states[b as usize].accepting
    }

    /// Whether some string is accepted by both: reachability of a pair of accepting states in the product,
    /// depth-first, each pair visited once (at most the product of the two state counts), charged to `budget`.
    pub(super) fn overlaps(&self, other: &Nfa, budget: &mut Budget) -> Result<bool, Exhausted> {
        budget.spend(1)?;
        if !self.prefixes_agree(other) {
            return Ok(false);
        }
        // A table of every pair is faster than a set; its size is charged too (one unit per 64 pairs).
        let width = other.states.len();
        let pairs = self.states.len() * width;
        budget.spend(u64::try_from(pairs / 64).unwrap_or(u64::MAX))?;
        let mut seen = vec![false; pairs];
        seen[0] = true;
        let mut stack = vec![(Self::START, Self::START)];
        while let Some((a, b)) = stack.pop() {
            if self.both_accept(other, a, b) {
                return Ok(true);
            }
            budget.visit(self, other, a, b)?;
            self.steps(other, a, b, |ta, tb, _, _| {
                let live =
                    self.remaining[ta as usize] != DEAD && other.remaining[tb as usize] != DEAD;
                if live && !std::mem::replace(&mut seen[ta as usize * width + tb as usize], true) {
                    stack.push((ta, tb));
                }
            });
        }
        Ok(false)
    }

    /// A string both accept, or `None` when there is none. The same product as [`Nfa::overlaps`], searched
    /// cheapest-first (A*): the cost is the length, plus [`ODD_PATH_COST`] for each empty segment, segment
    /// starting with `.`, or trailing `/`, so the witness is an ordinary path when one exists. Whether a witness
    /// is found does not depend on those costs.
    pub(super) fn witness(
        &self,
        other: &Nfa,
        budget: &mut Budget,
    ) -> Result<Option<String>, Exhausted> {
        budget.spend(1)?;
        if !self.prefixes_agree(other) {
            return Ok(None);
        }
        Search::new(self, other).run(budget)
    }
}

/// A node of the witness search: a pair of states, and whether the string so far ends at a segment start (empty,
/// or ending in `/`), which is what the odd-path cost looks at.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Node {
    a: StateId,
    b: StateId,
    segment_start: bool,
}

/// A* over the product. The estimate of what is left is the larger of the two states' [`Nfa::remaining`]: never
/// more than the true cost, and falling by at most one per character, so the first witness settled is a cheapest
/// one. Visits are kept in a map, so the work is proportional to the nodes reached.
struct Search<'n> {
    a: &'n Nfa,
    b: &'n Nfa,
    /// Per node reached: the cheapest cost so far, and the node it was reached from with the character read
    /// (`None` for the start).
    visits: HashMap<Node, (u32, Option<(Node, char)>)>,
    /// Nodes to settle, by cost so far plus estimate.
    queue: BinaryHeap<Reverse<(u32, Node)>>,
}

impl<'n> Search<'n> {
    fn new(a: &'n Nfa, b: &'n Nfa) -> Self {
        Search {
            a,
            b,
            visits: HashMap::new(),
            queue: BinaryHeap::new(),
        }
    }

    /// What is left from `node` at least, or `None` when one of its states can no longer accept.
    fn estimate(&self, node: Node) -> Option<u32> {
        let ra = self.a.remaining[node.a as usize];
        let rb = self.b.remaining[node.b as usize];
        (ra != DEAD && rb != DEAD).then_some(ra.max(rb))
    }

    fn reach(&mut self, node: Node, cost: u32, from: Option<(Node, char)>) {
        let Some(estimate) = self.estimate(node) else {
            return;
        };
        if self
            .visits
            .get(&node)
            .is_none_or(|(known, _)| cost < *known)
        {
            self.visits.insert(node, (cost, from));
            self.queue
                .push(Reverse((cost.saturating_add(estimate), node)));
        }
    }

    fn run(mut self, budget: &mut Budget) -> Result<Option<String>, Exhausted> {
        let start = Node {
            a: Nfa::START,
            b: Nfa::START,
            segment_start: true,
        };
        self.reach(start, 0, None);
        let mut best: Option<(u32, Node)> = None;
        let mut next = Vec::new();
        while let Some(Reverse((bound, node))) = self.queue.pop() {
            if best.is_some_and(|(b, _)| bound >= b) {
                break;
            }
            let cost = self.visits.get(&node).map_or(u32::MAX, |(c, _)| *c);
            if self
                .estimate(node)
                .is_none_or(|e| cost.saturating_add(e) < bound)
            {
                // A stale entry: this node was reached more cheaply since it was queued.
                continue;
            }
            budget.visit(self.a, self.b, node.a, node.b)?;
            let odd = if node.segment_start { ODD_PATH_COST } else { 0 };
            if self.a.both_accept(self.b, node.a, node.b)
                && best.is_none_or(|(b, _)| cost + odd < b)
            {
                best = Some((cost + odd, node));
            }
            next.clear();
            self.a.steps(self.b, node.a, node.b, |a, b, c, slash| {
                if let Some(c) = c {
                    let extra = if c == '.' { odd } else { 0 };
                    next.push((a, b, false, cost + 1 + extra, c));
                }
                if slash {
                    next.push((a, b, true, cost + 1 + odd, '/'));
                }
            });
            for &(a, b, segment_start, to_cost, c) in &next {
                let to = Node {
                    a,
                    b,
                    segment_start,
                };
                self.reach(to, to_cost, Some((node, c)));
            }
        }
        Ok(best.map(|(_, end)| self.path_to(end)))
    }

    fn path_to(&self, end: Node) -> String {
        let mut chars = Vec::new();
        let mut node = end;
        // Each node was reached from one settled earlier, so this walks back to the start; the bound guards a bug.
        for _ in 0..self.visits.len() {
            let Some((prev, c)) = self.visits.get(&node).and_then(|(_, from)| *from) else {
                break;
            };
            chars.push(c);
            node = prev;
        }
        chars.iter().rev().collect()
    }
}
