//! Untrusted text made inert for GitHub (no mention, reference or closing keyword takes effect), still readable.

/// GitHub's closing keywords (any case); followed by a reference they close it when the pull request merges.
const CLOSING_KEYWORDS: [&str; 9] = [
    "close", "closes", "closed", "fix", "fixes", "fixed", "resolve", "resolves", "resolved",
];

/// Whether the text after a closing keyword could be what it closes (`#1`, `o/r#1`, a URL, `GH-1`): after an
/// optional `:` and spaces, anything but a plain word. "Fix the redirect" stays as typed.
fn names_something(after: &[char]) -> bool {
    let mut rest = after;
    if rest.first() == Some(&':') {
        rest = &rest[1..];
    }
    let token: String = rest
        .iter()
        .skip_while(|c| c.is_whitespace())
        .take_while(|c| !c.is_whitespace())
        .collect();
    let plain = token.starts_with(|c: char| c.is_ascii_alphabetic())
        && !token.contains(['#', '/', ':', '&'])
        && !token.to_ascii_lowercase().starts_with("gh-");
    !plain
}

/// Untrusted text made inert for GitHub, still readable: a zero-width space (U+200B, what Dependabot and
/// Renovate use) after every `@` (no mention or team ping), after a `#` that starts a reference (`#12`,
/// `org/repo#12`) and after `GH-`, and inside a closing keyword followed by what it could close; `&` before an
/// entity is escaped so
/// `&#64;` cannot render into an `@` after this pass. Markdown headings (`# `, `##`) keep working.
pub fn inert(text: &str) -> String {
    const ZWSP: char = '\u{200B}';
    let chars: Vec<char> = text.chars().collect();
    let mut out = String::with_capacity(text.len() + 16);
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        let next = chars.get(i + 1).copied();
        // Whole runs of letters, so a keyword is found whatever precedes it.
        if c.is_ascii_alphabetic() {
            let end = (i..chars.len())
                .find(|&j| !chars[j].is_ascii_alphabetic())
                .unwrap_or(chars.len());
            let word: String = chars[i..end].iter().collect();
            let lower = word.to_ascii_lowercase();
            if CLOSING_KEYWORDS.contains(&lower.as_str()) && names_something(&chars[end..]) {
                out.push(c);
                out.push(ZWSP);
                out.push_str(&word[1..]);
                i = end;
                continue;
            }
            if lower == "gh"
                && chars.get(end) == Some(&'-')
                && chars.get(end + 1).is_some_and(char::is_ascii_digit)
            {
                out.push_str(&word);
                out.push('-');
                out.push(ZWSP);
                i = end + 1;
                continue;
            }
            out.push_str(&word);
            i = end;
            continue;
        }
        out.push(c);
        match c {
            '@' if next != Some(ZWSP) => out.push(ZWSP),
            '#' if next.is_some_and(|n| n != '#' && n != ZWSP && !n.is_whitespace()) => {
                out.push(ZWSP)
            }
            '&' if next.is_some_and(|n| n == '#' || n.is_ascii_alphabetic()) => {
                out.push_str("amp;")
            }
            _ => {}
        }
        i += 1;
    }
    out
}
