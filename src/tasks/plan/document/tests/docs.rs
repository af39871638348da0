//! docs/plans.md says what the code does: its example is a valid plan, and its overlap table is the engine's
//! answer, witness included.

use super::*;

const PLANS_MD: &str = include_str!("../../../../../docs/plans.md");

#[test]
fn the_example_in_docs_plans_md_is_a_valid_plan() {
    let start = PLANS_MD.find("```json\n").expect("an example") + "```json\n".len();
    let end = start + PLANS_MD[start..].find("```").expect("its end");
    let plan = PlanDocument::parse(&PLANS_MD.as_bytes()[start..end], &limits())
        .unwrap_or_else(|e| panic!("{e}"));
    let order: Vec<&str> = plan
        .topological_order()
        .iter()
        .map(|i| i.id().as_str())
        .collect();
    assert_eq!(order, ["db", "api", "web"]);
}

#[test]
fn the_overlap_table_in_docs_plans_md_is_what_the_engine_says() {
    let section = &PLANS_MD[PLANS_MD.find("### Overlap").expect("the section")..];
    let rows: Vec<Vec<&str>> = section
        .lines()
        .skip_while(|l| !l.starts_with("| one item"))
        .skip(2)
        .take_while(|l| l.starts_with('|'))
        .map(|l| {
            l.trim_matches('|')
                .split('|')
                .map(|c| c.trim().trim_matches('`'))
                .collect()
        })
        .collect();
    assert!(rows.len() >= 5, "{rows:?}");
    for row in rows {
        let [a, b, overlap, witness] = row[..] else {
            panic!("{row:?}")
        };
        let (a, b): (Glob, Glob) = (a.parse().unwrap(), b.parse().unwrap());
        assert_eq!(a.overlaps(&b), overlap == "yes", "{a} {b}");
        let expected = (!witness.is_empty()).then(|| witness.to_owned());
        assert_eq!(a.overlap_witness(&b), expected, "{a} {b}");
    }
}
