//! Path globs as scopes use them: repository-relative, `/`-separated.
//!
//! | syntax | matches |
//! | --- | --- |
//! | `*` | any characters except `/`, none included |
//! | `**` (a whole segment) | any number of whole segments, none included: `a/**/b` matches `a/b` and `a/x/y/b`; `a/**` matches `a` and everything beneath it |
//! | `?` | one character except `/` |
//! | `[abc]`, `[a-z]`, `[!a]` (or `[^a]`) | one character of the class (never `/`); `]` first is a literal `]` |
//! | `{a,b}` | one of the alternatives (within a segment, not nested) |
//! | anything else | itself |
//!
//! A pattern without glob characters is a path: it matches itself and everything beneath it (`src/api` matches
//! `src/api/x.rs`, not `src/apix`). A trailing `/` means the same for any pattern (`src/*/` is `src/*/**`).
//! There is no escape character: `[*]` is a literal `*`.
//!
//! Both [`Glob::matches`] and [`Glob::overlaps`] run the same automaton (see `nfa.rs`).

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

mod nfa;

pub(crate) use nfa::{Budget, Exhausted};
use nfa::{Builder, CharSet, Nfa, StateId};

/// A valid path glob. Compared, hashed and printed as its canonical text, which parses back to the same glob.
#[derive(Clone, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct Glob {
    text: String,
    nfa: Nfa,
    path: bool,
}

/// Why a pattern was refused: the pattern (cut to 100 characters) and the rule it broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("glob {pattern:?} {kind}")]
pub struct GlobError {
    pub pattern: String,
    pub kind: GlobErrorKind,
}

/// The rule a refused pattern broke.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum GlobErrorKind {
    #[error("is empty")]
    Empty,
    #[error("is {chars} characters; at most {max} allowed")]
    TooLong { chars: usize, max: usize },
    #[error("is absolute; write it relative to the repository root, without the leading /")]
    Absolute,
    #[error("contains the control character {0:?}")]
    Control(char),
    #[error("contains a backslash; paths are /-separated and there is no escape character (write [*] for a literal *)")]
    Backslash,
    #[error("has an empty segment (two / in a row, or an empty alternative as a whole segment)")]
    EmptySegment,
    #[error("has a {0:?} segment; a scope names paths inside the repository, without . or ..")]
    DotSegment(&'static str),
    #[error("has a [ that is never closed by ]")]
    UnclosedClass,
    #[error("has a class that matches no character")]
    EmptyClass,
    #[error("has the reversed range {0}-{1} in a class")]
    ReversedRange(char, char),
    #[error("has a / inside [...]; a class stands for one character of a segment")]
    SlashInClass,
    #[error("has a {{ that is never closed by }}")]
    UnclosedBrace,
    #[error("nests {{...}} inside {{...}}, which is not supported; list every combination in one {{...}}")]
    NestedBrace,
    #[error("has a / inside {{...}}; alternatives stay within one segment, so write separate globs instead")]
    SlashInBrace,
    #[error("has a {0:?} that closes nothing (write [{0}] for a literal {0})")]
    StrayClose(char),
    #[error(
        "has a comma outside {{...}}; scopes are comma-separated (write [,] for a literal comma)"
    )]
    Comma,
    #[error(
        "has ** inside a segment; ** must be a whole segment (a/**/b), use * within a segment"
    )]
    StarStarInSegment,
}

/// One element of a segment.
#[derive(Clone, Debug)]
enum Atom {
    Literal(char),
    /// `?`, or a class: one character of the set.
    One(CharSet),
    Star,
    /// `{a,b}`: sequences without alternation inside.
    Alternatives(Vec<Vec<Atom>>),
}

#[derive(Clone, Debug)]
enum Segment {
    /// `**`: any number of whole segments.
    Any,
    Atoms(Vec<Atom>),
}

impl Glob {
    /// The longest pattern accepted, in characters.
    pub const MAX_CHARS: usize = 300;

    /// The canonical text.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// Whether this is a plain path (no glob characters), which matches itself and everything beneath it.
    pub fn is_path(&self) -> bool {
        self.path
    }

    /// Whether `path` (repository-relative, `/`-separated, as git prints it) matches. The comparison is exact,
    /// character by character: no case folding, no normalization of `./` or `//`.
    pub fn matches(&self, path: &str) -> bool {
        self.nfa.matches(path)
    }

    /// Whether some path matches both globs: `src/**` overlaps `src/api/*.rs`, `src/*.rs` does not overlap
    /// `src/api/x.rs`. Symmetric.
    pub fn overlaps(&self, other: &Glob) -> bool {
        // An unlimited budget does not run out; were it to, "overlap" is the answer that refuses rather than
        // lets two agents edit one file.
        self.nfa
            .overlaps(&other.nfa, &mut Budget::unlimited())
            .unwrap_or(true)
    }

    /// A path both globs match, or `None` when they do not overlap. The witness is an ordinary path (no empty
    /// segment, no segment starting with `.` unless a glob demands one) and among those one of the shortest.
    pub fn overlap_witness(&self, other: &Glob) -> Option<String> {
        // The unlimited budget cannot run out (see `overlaps`).
        self.overlap_witness_within(other, &mut Budget::unlimited())
            .ok()
            .flatten()
    }

    /// [`Glob::overlap_witness`], charged to a budget shared by many comparisons (a whole plan's scopes), so
    /// their total work is bounded however the globs were written; `Err` when the budget ran out.
    pub(crate) fn overlap_witness_within(
        &self,
        other: &Glob,
        budget: &mut Budget,
    ) -> Result<Option<String>, Exhausted> {
        // Reachability first: it settles a pair that does not overlap more cheaply than the witness search.
        if !self.nfa.overlaps(&other.nfa, budget)? {
            return Ok(None);
        }
        self.nfa.witness(&other.nfa, budget)
    }

    fn parse(text: &str) -> Result<Glob, GlobError> {
        let refuse = |kind| GlobError {
            pattern: cut(text, 100),
            kind,
        };
        if text.is_empty() {
            return Err(refuse(GlobErrorKind::Empty));
        }
        let chars = text.chars().count();
        if chars > Self::MAX_CHARS {
            return Err(refuse(GlobErrorKind::TooLong {
                chars,
                max: Self::MAX_CHARS,
            }));
        }
        if let Some(c) = text.chars().find(|c| c.is_control()) {
            return Err(refuse(GlobErrorKind::Control(c)));
        }
        if text.contains('\\') {
            return Err(refuse(GlobErrorKind::Backslash));
        }
        if text.starts_with('/') {
            return Err(refuse(GlobErrorKind::Absolute));
        }
        let (body, trailing_slash) = match text.strip_suffix('/') {
            Some(body) => (body, true),
            None => (text, false),
        };
        let mut raw_segments: Vec<&str> = Vec::new();
        let mut segments: Vec<Segment> = Vec::new();
        // Neither a class nor alternatives may hold a `/`, so every `/` separates segments.
        let mut offset = 0;
        for raw in body.split('/') {
            offset += raw.len() + 1;
            let rest = body.get(offset..).unwrap_or("");
            let segment = parse_segment(raw).map_err(|kind| refuse(refine(kind, rest)))?;
            // `**/**` means what `**` means; one spelling keeps the canonical text unique.
            if matches!(segment, Segment::Any) && matches!(segments.last(), Some(Segment::Any)) {
                continue;
            }
            raw_segments.push(raw);
            segments.push(segment);
        }
        let path = segments
            .iter()
            .all(|s| matches!(s, Segment::Atoms(atoms) if atoms.iter().all(|a| matches!(a, Atom::Literal(_)))));
        let mut canonical = raw_segments.join("/");
        // "Everything beneath" is a trailing `**`; a glob's trailing `/` is written that way in the canonical
        // text, a path's is dropped because a path means it anyway.
        let beneath = path || trailing_slash;
        if beneath && !matches!(segments.last(), Some(Segment::Any)) {
            segments.push(Segment::Any);
            if !path {
                canonical.push_str("/**");
            }
        }
        Ok(Glob {
            text: canonical,
            nfa: compile(&segments),
            path,
        })
    }
}

/// Cuts `text` to `max` characters, marking the cut.
fn cut(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_owned();
    }
    let mut out: String = text.chars().take(max).collect();
    out.push('…');
    out
}

/// Refines the error of a segment whose class or alternatives never close: when a `]` or `}` follows in a later
/// segment, the writer put a `/` inside, which is the precise complaint.
fn refine(kind: GlobErrorKind, rest: &str) -> GlobErrorKind {
    match kind {
        GlobErrorKind::UnclosedClass if rest.contains(']') => GlobErrorKind::SlashInClass,
        GlobErrorKind::UnclosedBrace if rest.contains('}') => GlobErrorKind::SlashInBrace,
        kind => kind,
    }
}

fn parse_segment(raw: &str) -> Result<Segment, GlobErrorKind> {
    match raw {
        "" => return Err(GlobErrorKind::EmptySegment),
        "." => return Err(GlobErrorKind::DotSegment(".")),
        ".." => return Err(GlobErrorKind::DotSegment("..")),
        "**" => return Ok(Segment::Any),
        _ => {}
    }
    let chars: Vec<char> = raw.chars().collect();
    let mut pos = 0;
    let atoms = parse_atoms(&chars, &mut pos, false)?;
    // A segment that is one `{...}` must not be able to spell an empty, `.` or `..` segment.
    if let [Atom::Alternatives(alternatives)] = atoms.as_slice() {
        for alternative in alternatives {
            let literal: Option<String> = alternative
                .iter()
                .map(|a| match a {
                    Atom::Literal(c) => Some(*c),
                    _ => None,
                })
                .collect();
            match literal.as_deref() {
                Some("") => return Err(GlobErrorKind::EmptySegment),
                Some(".") => return Err(GlobErrorKind::DotSegment(".")),
                Some("..") => return Err(GlobErrorKind::DotSegment("..")),
                _ => {}
            }
        }
    }
    Ok(Segment::Atoms(atoms))
}

/// Parses atoms from `chars[*pos..]` up to the end, or inside `{...}` up to a `,` or `}` (left unconsumed).
fn parse_atoms(
    chars: &[char],
    pos: &mut usize,
    in_brace: bool,
) -> Result<Vec<Atom>, GlobErrorKind> {
    let mut atoms = Vec::new();
    while let Some(&c) = chars.get(*pos) {
        match c {
            ',' | '}' if in_brace => break,
            '*' => {
                if chars.get(*pos + 1) == Some(&'*') {
                    return Err(GlobErrorKind::StarStarInSegment);
                }
                atoms.push(Atom::Star);
                *pos += 1;
            }
            '?' => {
                atoms.push(Atom::One(CharSet::any_but_slash()));
                *pos += 1;
            }
            '[' => atoms.push(Atom::One(parse_class(chars, pos)?)),
            '{' if in_brace => return Err(GlobErrorKind::NestedBrace),
            '{' => {
                *pos += 1;
                let mut alternatives = vec![parse_atoms(chars, pos, true)?];
                loop {
                    match chars.get(*pos) {
                        Some(',') => {
                            *pos += 1;
                            alternatives.push(parse_atoms(chars, pos, true)?);
                        }
                        Some('}') => {
                            *pos += 1;
                            break;
                        }
                        _ => return Err(GlobErrorKind::UnclosedBrace),
                    }
                }
                atoms.push(Atom::Alternatives(alternatives));
            }
            ']' | '}' => return Err(GlobErrorKind::StrayClose(c)),
            ',' => return Err(GlobErrorKind::Comma),
            _ => {
                atoms.push(Atom::Literal(c));
                *pos += 1;
            }
        }
    }
    Ok(atoms)
}

/// Parses `[...]` starting at the `[`.
fn parse_class(chars: &[char], pos: &mut usize) -> Result<CharSet, GlobErrorKind> {
    let mut i = *pos + 1;
    let negated = matches!(chars.get(i), Some('!' | '^'));
    if negated {
        i += 1;
    }
    let mut ranges = Vec::new();
    let first = i;
    loop {
        let Some(&c) = chars.get(i) else {
            return Err(GlobErrorKind::UnclosedClass);
        };
        if c == ']' && i > first {
            break;
        }
        // `a-z` is a range; a `-` first or last is itself.
        match (chars.get(i + 1), chars.get(i + 2)) {
            (Some('-'), Some(&hi)) if hi != ']' => {
                if hi < c {
                    return Err(GlobErrorKind::ReversedRange(c, hi));
                }
                ranges.push((c, hi));
                i += 3;
            }
            _ => {
                ranges.push((c, c));
                i += 1;
            }
        }
    }
    *pos = i + 1;
    let set = CharSet::class(&ranges, negated);
    if set.is_empty() {
        return Err(GlobErrorKind::EmptyClass);
    }
    Ok(set)
}

/// Builds the automaton. `**` absorbs the `/` next to it, so "none" leaves `a/**/b` as `a/b`, `**/b` as `b` and
/// `a/**` as `a`.
fn compile(segments: &[Segment]) -> Nfa {
    let mut nfa = Builder::new();
    let mut current = Builder::START;
    // Whether `current` already sits where a segment begins (the start, or after a `**` in the middle).
    let mut at_segment_start = true;
    for (index, segment) in segments.iter().enumerate() {
        let last = index + 1 == segments.len();
        match segment {
            Segment::Any => {
                let begin = if index == 0 {
                    current
                } else {
                    if last {
                        // A trailing `**` also matches none: what came before is a match on its own.
                        nfa.accept(current);
                    }
                    let after_slash = nfa.add_state();
                    nfa.edge(current, CharSet::slash(), after_slash);
                    after_slash
                };
                let inside = nfa.add_state();
                nfa.edge(begin, CharSet::any_but_slash(), inside);
                if last {
                    nfa.edge(inside, CharSet::any(), inside);
                    nfa.accept(inside);
                } else {
                    nfa.edge(inside, CharSet::any_but_slash(), inside);
                    nfa.edge(inside, CharSet::slash(), begin);
                    current = begin;
                    at_segment_start = true;
                }
            }
            Segment::Atoms(atoms) => {
                if !at_segment_start {
                    let next = nfa.add_state();
                    nfa.edge(current, CharSet::slash(), next);
                    current = next;
                }
                current = compile_atoms(&mut nfa, current, atoms);
                at_segment_start = false;
                if last {
                    nfa.accept(current);
                }
            }
        }
    }
    nfa.finish()
}

fn compile_atoms(nfa: &mut Builder, mut current: StateId, atoms: &[Atom]) -> StateId {
    for atom in atoms {
        current = match atom {
            Atom::Literal(c) => {
                let next = nfa.add_state();
                nfa.edge(current, CharSet::single(*c), next);
                next
            }
            Atom::One(set) => {
                let next = nfa.add_state();
                nfa.edge(current, set.clone(), next);
                next
            }
            Atom::Star => {
                // A fresh state for the loop: `current` may have edges of its own (an alternative's start).
                let next = nfa.add_state();
                nfa.epsilon(current, next);
                nfa.edge(next, CharSet::any_but_slash(), next);
                next
            }
            Atom::Alternatives(alternatives) => {
                let join = nfa.add_state();
                for alternative in alternatives {
                    let end = compile_atoms(nfa, current, alternative);
                    nfa.epsilon(end, join);
                }
                join
            }
        };
    }
    current
}

impl FromStr for Glob {
    type Err = GlobError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Glob::parse(s)
    }
}

impl TryFrom<String> for Glob {
    type Error = GlobError;
    fn try_from(s: String) -> Result<Self, Self::Error> {
        Glob::parse(&s)
    }
}

impl From<Glob> for String {
    fn from(glob: Glob) -> Self {
        glob.text
    }
}

impl fmt::Display for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for Glob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Glob({:?})", self.text)
    }
}

impl PartialEq for Glob {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Glob {}

impl std::hash::Hash for Glob {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        self.text.hash(state);
    }
}

impl PartialOrd for Glob {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}

impl Ord for Glob {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        self.text.cmp(&other.text)
    }
}

#[cfg(test)]
mod tests;
