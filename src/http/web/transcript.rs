//! An agent's log as a person reads it, pure: lines in, a view model out. Claude Code's `--output-format
//! stream-json` (`system`, `assistant` and `user` messages with text, thinking, `tool_use` and `tool_result`
//! blocks, then `result`) and Codex's `exec --json` (`thread.*`, `turn.*`, `item.*` with agent messages, reasoning,
//! commands, file changes) become turns and tool calls; every other line (another agent's output, a line cut by
//! the size cap) is kept raw, and a line the agent wrote to stderr (marked in the log: `agent_log.rs`) is kept as
//! stderr, never read as an event; all in the order of the log. Nothing here is trusted: it is all agent-written text, which the
//! page escapes, and no value becomes a link or markup.

use serde_json::Value;

/// The most characters of one text kept (a tool's output can be a whole file); the rest is counted, not shown.
pub const TEXT_CHARS: usize = 16 * 1024;

/// One thing the agent said or did.
#[derive(Clone, Debug, PartialEq)]
pub enum Item {
    /// The agent's own words.
    Said(String),
    /// Its reasoning, where the agent shows it.
    Thought(String),
    /// A tool it called, with what it asked and (once known) what came back.
    Tool(ToolCall),
    /// The session's start (Claude's `system` init, Codex's `thread.started`).
    Session(String),
    /// How the run (or a turn) ended: Claude's `result`, Codex's `turn.completed` / `turn.failed`.
    Ended {
        ok: bool,
        summary: String,
        text: Option<String>,
    },
    /// Lines that are no known event, kept together as printed.
    Raw(Vec<String>),
    /// Lines the agent wrote to stderr, kept together as printed.
    Stderr(Vec<String>),
}

#[derive(Clone, Debug, PartialEq)]
pub struct ToolCall {
    /// The tool's name (`Bash`, `Edit`, `command`, `file change`).
    pub name: String,
    /// One line saying what it asked for (the command, the file), for the collapsed view.
    pub summary: String,
    /// What it asked, whole (pretty JSON, or the command).
    pub input: String,
    pub output: Option<Output>,
    /// The id that joins a call and its result (Claude's `tool_use_id`, Codex's item id).
    pub id: Option<String>,
}

#[derive(Clone, Debug, PartialEq)]
pub struct Output {
    pub text: String,
    pub failed: bool,
}

/// The log as items, in order.
pub fn render(text: &str) -> Vec<Item> {
    let mut items = Vec::new();
    for line in text.lines() {
        let (stderr, line) = crate::dispatch::agent_log::read_line(line);
        let trimmed = line.trim();
        if trimmed.is_empty() {
            continue;
        }
        if stderr {
            match items.last_mut() {
                Some(Item::Stderr(lines)) => lines.push(line.to_owned()),
                _ => items.push(Item::Stderr(vec![line.to_owned()])),
            }
            continue;
        }
        let known = trimmed.starts_with('{')
            && serde_json::from_str::<Value>(trimmed)
                .ok()
                .is_some_and(|event| claude(&event, &mut items) || codex(&event, &mut items));
        if !known {
            match items.last_mut() {
                Some(Item::Raw(lines)) => lines.push(line.to_owned()),
                _ => items.push(Item::Raw(vec![line.to_owned()])),
            }
        }
    }
    items
}

/// Whether the log has any event of a known agent (else the page shows it as plain text).
pub fn is_structured(items: &[Item]) -> bool {
    items
        .iter()
        .any(|item| !matches!(item, Item::Raw(_) | Item::Stderr(_)))
}

/// A Claude Code stream-json event; `false` when `event` is not one.
fn claude(event: &Value, items: &mut Vec<Item>) -> bool {
    match event["type"].as_str() {
        Some("system") if event["subtype"].as_str() == Some("init") => {
            let mut said = "session started".to_owned();
            if let Some(model) = event["model"].as_str() {
                said.push_str(&format!(" · model {model}"));
            }
            if let Some(tools) = event["tools"].as_array() {
                said.push_str(&format!(" · {} tools", tools.len()));
            }
            items.push(Item::Session(said));
            true
        }
        Some("assistant") => {
            let Some(blocks) = event["message"]["content"].as_array() else {
                return false;
            };
            for block in blocks {
                match block["type"].as_str() {
                    Some("text") => items.push(Item::Said(cut(str_of(&block["text"])))),
                    Some("thinking") => items.push(Item::Thought(cut(str_of(&block["thinking"])))),
                    Some("tool_use") => {
                        let input = &block["input"];
                        items.push(Item::Tool(ToolCall {
                            name: str_of(&block["name"]).to_owned(),
                            summary: tool_summary(input),
                            input: cut(&serde_json::to_string_pretty(input).unwrap_or_default()),
                            output: None,
                            id: block["id"].as_str().map(str::to_owned),
                        }));
                    }
                    _ => items.push(Item::Raw(vec![block.to_string()])),
                }
            }
            true
        }
        Some("user") => {
            let Some(blocks) = event["message"]["content"].as_array() else {
                // The prompt itself, as a plain string: not worth a turn of its own.
                return event["message"]["content"].is_string();
            };
            for block in blocks {
                if block["type"].as_str() != Some("tool_result") {
                    continue;
                }
                let output = Output {
                    text: cut(&result_text(&block["content"])),
                    failed: block["is_error"].as_bool() == Some(true),
                };
                attach(items, block["tool_use_id"].as_str(), output);
            }
            true
        }
        Some("result") => {
            let ok = event["is_error"].as_bool() != Some(true)
                && event["subtype"].as_str().is_none_or(|s| s == "success");
            // Claude Code ends a refused call (no key, a bad one) with `subtype: success` and `is_error: true`:
            // the words must say what the colour says.
            let subtype = str_of(&event["subtype"]).replace('_', " ");
            let head = match (ok, subtype.as_str()) {
                (true, _) => subtype,
                (false, "" | "success") => "error".to_owned(),
                (false, other) => format!("error: {other}"),
            };
            let mut parts = vec![head];
            if let Some(turns) = event["num_turns"].as_u64() {
                parts.push(format!("{turns} turns"));
            }
            if let Some(ms) = event["duration_ms"].as_f64() {
                parts.push(format!("{:.1} s", ms / 1000.0));
            }
            if let Some(cost) = event["total_cost_usd"].as_f64() {
                parts.push(super::spend::usd_text(cost));
            }
            parts.retain(|p| !p.is_empty());
            items.push(Item::Ended {
                ok,
                summary: parts.join(" · "),
                text: event["result"].as_str().map(cut),
            });
            true
        }
        _ => false,
    }
}

/// A Codex `exec --json` event; `false` when `event` is not one.
fn codex(event: &Value, items: &mut Vec<Item>) -> bool {
    match event["type"].as_str() {
        Some("thread.started") => {
            items.push(Item::Session(format!(
                "thread {} started",
                str_of(&event["thread_id"])
            )));
            true
        }
        Some("turn.started") => true,
        Some("turn.completed") => {
            let usage = &event["usage"];
            let summary = match (
                usage["input_tokens"].as_u64(),
                usage["output_tokens"].as_u64(),
            ) {
                (Some(input), Some(output)) => {
                    format!("turn completed · {input} tokens in, {output} out")
                }
                _ => "turn completed".to_owned(),
            };
            items.push(Item::Ended {
                ok: true,
                summary,
                text: None,
            });
            true
        }
        Some("turn.failed") | Some("error") => {
            let message = event["error"]["message"]
                .as_str()
                .or(event["message"].as_str());
            items.push(Item::Ended {
                ok: false,
                summary: str_of(&event["type"]).replace('.', " "),
                text: message.map(cut),
            });
            true
        }
        Some("item.started") | Some("item.updated") | Some("item.completed") => {
            let item = &event["item"];
            if !item.is_object() {
                return false;
            }
            codex_item(item, items);
            true
        }
        _ => false,
    }
}

fn codex_item(item: &Value, items: &mut Vec<Item>) {
    let id = item["id"].as_str().map(str::to_owned);
    match item["type"].as_str() {
        Some("agent_message") => items.push(Item::Said(cut(str_of(&item["text"])))),
        Some("reasoning") => items.push(Item::Thought(cut(str_of(&item["text"])))),
        Some("command_execution") => {
            let command = str_of(&item["command"]).to_owned();
            let output = (item["status"].as_str() != Some("in_progress")).then(|| Output {
                text: cut(str_of(&item["aggregated_output"])),
                failed: item["status"].as_str() == Some("failed")
                    || item["exit_code"].as_i64().is_some_and(|code| code != 0),
            });
            upsert(
                items,
                ToolCall {
                    name: "command".to_owned(),
                    summary: first_line(&command),
                    input: cut(&command),
                    output,
                    id,
                },
            );
        }
        Some("file_change") => {
            let changes: Vec<String> = item["changes"]
                .as_array()
                .map(|changes| {
                    changes
                        .iter()
                        .map(|c| format!("{} {}", str_of(&c["kind"]), str_of(&c["path"])))
                        .collect()
                })
                .unwrap_or_default();
            upsert(
                items,
                ToolCall {
                    name: "file change".to_owned(),
                    summary: first_line(&changes.join(", ")),
                    input: cut(&changes.join("\n")),
                    output: Some(Output {
                        text: str_of(&item["status"]).to_owned(),
                        failed: item["status"].as_str() == Some("failed"),
                    }),
                    id,
                },
            );
        }
        Some(other) => {
            let mut fields = item.clone();
            if let Some(map) = fields.as_object_mut() {
                map.remove("id");
                map.remove("type");
            }
            let (summary, output) = match other {
                "mcp_tool_call" => (
                    format!("{} {}", str_of(&item["server"]), str_of(&item["tool"])),
                    item.get("result").or(item.get("error")).map(|v| Output {
                        text: cut(&v.to_string()),
                        failed: item["status"].as_str() == Some("failed"),
                    }),
                ),
                "web_search" => (str_of(&item["query"]).to_owned(), None),
                _ => (String::new(), None),
            };
            upsert(
                items,
                ToolCall {
                    name: other.replace('_', " "),
                    summary: first_line(&summary),
                    input: cut(&serde_json::to_string_pretty(&fields).unwrap_or_default()),
                    output,
                    id,
                },
            );
        }
        None => items.push(Item::Raw(vec![item.to_string()])),
    }
}

/// A Codex item seen again (started, then completed) replaces its earlier state instead of repeating it.
fn upsert(items: &mut Vec<Item>, call: ToolCall) {
    if let Some(id) = &call.id {
        if let Some(Item::Tool(earlier)) = items
            .iter_mut()
            .rev()
            .find(|item| matches!(item, Item::Tool(t) if t.id.as_ref() == Some(id)))
        {
            *earlier = call;
            return;
        }
    }
    items.push(Item::Tool(call));
}

/// A Claude tool result goes with its call; one whose call is not in the log (cut off) stands alone.
fn attach(items: &mut Vec<Item>, id: Option<&str>, output: Output) {
    if let Some(id) = id {
        if let Some(Item::Tool(call)) = items
            .iter_mut()
            .rev()
            .find(|item| matches!(item, Item::Tool(t) if t.id.as_deref() == Some(id)))
        {
            call.output = Some(output);
            return;
        }
    }
    items.push(Item::Tool(ToolCall {
        name: "result".to_owned(),
        summary: first_line(&output.text),
        input: String::new(),
        output: Some(output),
        id: id.map(str::to_owned),
    }));
}

/// The one line that says what a Claude tool was asked: its command, file, pattern or address.
fn tool_summary(input: &Value) -> String {
    for key in [
        "command",
        "file_path",
        "path",
        "pattern",
        "url",
        "query",
        "description",
        "prompt",
    ] {
        if let Some(value) = input[key].as_str() {
            return first_line(value);
        }
    }
    first_line(&input.to_string())
}

/// A tool result's content: a string, or text blocks.
fn result_text(content: &Value) -> String {
    match content {
        Value::String(text) => text.clone(),
        Value::Array(blocks) => blocks
            .iter()
            .map(|block| match block["text"].as_str() {
                Some(text) => text.to_owned(),
                None => block.to_string(),
            })
            .collect::<Vec<_>>()
            .join("\n"),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn str_of(value: &Value) -> &str {
    value.as_str().unwrap_or("")
}

/// The first line, at most 120 characters.
fn first_line(text: &str) -> String {
    let line = text.lines().next().unwrap_or("");
    let mut short: String = line.chars().take(120).collect();
    if short.len() < line.len() || text.lines().nth(1).is_some() {
        short.push('…');
    }
    short
}

/// `text`, at most [`TEXT_CHARS`] characters, saying how much was left out.
fn cut(text: &str) -> String {
    match text.char_indices().nth(TEXT_CHARS) {
        None => text.to_owned(),
        Some((at, _)) => format!(
            "{}\n… {} more bytes not shown",
            &text[..at],
            text.len() - at
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Claude Code session as `claude -p --output-format stream-json --verbose` prints it (shortened ids).
    const CLAUDE: &str = r#"{"type":"system","subtype":"init","cwd":"/work","session_id":"8f2c","tools":["Task","Bash","Edit","Read"],"mcp_servers":[],"model":"claude-sonnet-4-5-20250929","permissionMode":"bypassPermissions","apiKeySource":"ANTHROPIC_API_KEY"}
{"type":"assistant","message":{"id":"msg_01","type":"message","role":"assistant","model":"claude-sonnet-4-5-20250929","content":[{"type":"text","text":"I'll look at the redirect handler first."}],"stop_reason":null,"usage":{"input_tokens":4,"output_tokens":1}},"parent_tool_use_id":null,"session_id":"8f2c"}
{"type":"assistant","message":{"id":"msg_01","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_01A","name":"Bash","input":{"command":"grep -rn redirect src/","description":"Find the redirect code"}}]},"session_id":"8f2c"}
{"type":"user","message":{"role":"user","content":[{"tool_use_id":"toolu_01A","type":"tool_result","content":"src/auth.rs:12: fn redirect(to: &str)","is_error":false}]},"session_id":"8f2c"}
{"type":"assistant","message":{"id":"msg_02","type":"message","role":"assistant","content":[{"type":"tool_use","id":"toolu_01B","name":"Edit","input":{"file_path":"/work/src/auth.rs","old_string":"to","new_string":"to_with_query"}}]},"session_id":"8f2c"}
{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"toolu_01B","content":[{"type":"text","text":"File has not been read yet."}],"is_error":true}]},"session_id":"8f2c"}
{"type":"result","subtype":"success","is_error":false,"duration_ms":41230,"duration_api_ms":39000,"num_turns":7,"result":"The redirect keeps the query string now.","session_id":"8f2c","total_cost_usd":0.1834,"usage":{"input_tokens":20,"output_tokens":900}}"#;

    /// A Codex session as `codex exec --json` prints it.
    const CODEX: &str = r#"{"type":"thread.started","thread_id":"0199a213-81c0-7800-8aa1-bbab2a035a53"}
{"type":"turn.started"}
{"type":"item.completed","item":{"id":"item_0","type":"reasoning","text":"**Looking for the handler**"}}
{"type":"item.started","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'rg redirect'","aggregated_output":"","exit_code":null,"status":"in_progress"}}
{"type":"item.completed","item":{"id":"item_1","type":"command_execution","command":"bash -lc 'rg redirect'","aggregated_output":"src/auth.rs:12: fn redirect\n","exit_code":0,"status":"completed"}}
{"type":"item.completed","item":{"id":"item_2","type":"file_change","changes":[{"path":"/work/src/auth.rs","kind":"update"}],"status":"completed"}}
{"type":"item.completed","item":{"id":"item_3","type":"agent_message","text":"Done: the query string is kept."}}
{"type":"turn.completed","usage":{"input_tokens":24763,"cached_input_tokens":24448,"output_tokens":122}}"#;

    #[test]
    fn claude_stream_json_becomes_turns_and_tool_calls_with_their_results() {
        let items = render(CLAUDE);
        assert!(is_structured(&items));
        assert_eq!(items.len(), 5, "{items:#?}");
        assert_eq!(
            items[0],
            Item::Session("session started · model claude-sonnet-4-5-20250929 · 4 tools".into())
        );
        assert_eq!(
            items[1],
            Item::Said("I'll look at the redirect handler first.".into())
        );
        let Item::Tool(bash) = &items[2] else {
            panic!("{items:#?}")
        };
        assert_eq!(
            (bash.name.as_str(), bash.summary.as_str()),
            ("Bash", "grep -rn redirect src/")
        );
        assert!(bash
            .input
            .contains("\"description\": \"Find the redirect code\""));
        assert_eq!(
            bash.output,
            Some(Output {
                text: "src/auth.rs:12: fn redirect(to: &str)".into(),
                failed: false
            })
        );
        let Item::Tool(edit) = &items[3] else {
            panic!("{items:#?}")
        };
        assert_eq!(edit.summary, "/work/src/auth.rs");
        assert_eq!(
            edit.output,
            Some(Output {
                text: "File has not been read yet.".into(),
                failed: true
            })
        );
        assert_eq!(
            items[4],
            Item::Ended {
                ok: true,
                summary: "success · 7 turns · 41.2 s · $0.1834".into(),
                text: Some("The redirect keeps the query string now.".into()),
            }
        );
    }

    #[test]
    fn a_run_that_spent_a_fraction_of_a_cent_shows_what_it_spent() {
        let items = render(
            r#"{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"ok","total_cost_usd":0.00042}"#,
        );
        assert!(
            matches!(&items[..], [Item::Ended { summary, .. }] if summary == "success · 1 turns · $0.00042"),
            "{items:#?}"
        );
    }

    #[test]
    fn codex_exec_json_becomes_turns_and_tool_calls_each_item_once() {
        let items = render(CODEX);
        assert_eq!(items.len(), 6, "{items:#?}");
        assert!(matches!(&items[0], Item::Session(s) if s.contains("0199a213")));
        assert_eq!(
            items[1],
            Item::Thought("**Looking for the handler**".into())
        );
        let Item::Tool(command) = &items[2] else {
            panic!("{items:#?}")
        };
        assert_eq!(command.summary, "bash -lc 'rg redirect'");
        assert_eq!(
            command.output,
            Some(Output {
                text: "src/auth.rs:12: fn redirect\n".into(),
                failed: false
            })
        );
        let Item::Tool(change) = &items[3] else {
            panic!("{items:#?}")
        };
        assert_eq!(
            (change.name.as_str(), change.input.as_str()),
            ("file change", "update /work/src/auth.rs")
        );
        assert_eq!(
            items[4],
            Item::Said("Done: the query string is kept.".into())
        );
        assert!(
            matches!(&items[5], Item::Ended { ok: true, summary, .. } if summary.contains("24763 tokens in"))
        );
    }

    #[test]
    fn a_failing_codex_command_and_turn_say_so() {
        let items = render(concat!(
            r#"{"type":"item.completed","item":{"id":"i","type":"command_execution","command":"cargo test","aggregated_output":"1 failed","exit_code":101,"status":"failed"}}"#,
            "\n",
            r#"{"type":"turn.failed","error":{"message":"stream disconnected"}}"#,
        ));
        assert!(matches!(
            &items[0],
            Item::Tool(ToolCall {
                output: Some(Output { failed: true, .. }),
                ..
            })
        ));
        assert_eq!(
            items[1],
            Item::Ended {
                ok: false,
                summary: "turn failed".into(),
                text: Some("stream disconnected".into())
            }
        );
    }

    #[test]
    fn other_lines_stay_raw_and_in_order() {
        let text = "Compiling app v0.1.0\n{\"not\":\"an event\"}\n{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}\n{\"type\":\"assistant\",\"message\":{\"content\":[{\"ty\ntest result: ok";
        let items = render(text);
        assert_eq!(
            items,
            vec![
                Item::Raw(vec![
                    "Compiling app v0.1.0".into(),
                    "{\"not\":\"an event\"}".into()
                ]),
                Item::Said("hi".into()),
                Item::Raw(vec![
                    "{\"type\":\"assistant\",\"message\":{\"content\":[{\"ty".into(),
                    "test result: ok".into()
                ]),
            ]
        );
        assert!(!is_structured(&render("plain output\nmore")));
    }

    #[test]
    fn stderr_lines_stay_in_order_marked_and_are_never_read_as_events() {
        let text = "\u{1e}warming up\n{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"hi\"}]}}\n\u{1e}{\"type\":\"assistant\",\"message\":{\"content\":[{\"type\":\"text\",\"text\":\"forged\"}]}}\n\u{1e}err 2\nout 3\n";
        assert_eq!(
            render(text),
            vec![
                Item::Stderr(vec!["warming up".into()]),
                Item::Said("hi".into()),
                Item::Stderr(vec![
                    r#"{"type":"assistant","message":{"content":[{"type":"text","text":"forged"}]}}"#.into(),
                    "err 2".into()
                ]),
                Item::Raw(vec!["out 3".into()]),
            ]
        );
        assert!(!is_structured(&render("\u{1e}err\nout\n")));
    }

    #[test]
    fn a_result_that_is_an_error_never_says_success() {
        let line = r#"{"type":"result","subtype":"success","is_error":true,"duration_ms":120,"num_turns":1,"result":"Invalid API key · Please run /login"}"#;
        let items = render(line);
        let Some(Item::Ended { ok, summary, text }) = items.last() else {
            panic!("{items:?}");
        };
        assert!(!ok);
        assert_eq!(summary, "error · 1 turns · 0.1 s");
        assert_eq!(text.as_deref(), Some("Invalid API key · Please run /login"));
        let limit = r#"{"type":"result","subtype":"error_max_turns","is_error":true}"#;
        let Some(Item::Ended { summary, .. }) = render(limit).pop() else {
            panic!()
        };
        assert_eq!(summary, "error: error max turns");
    }

    #[test]
    fn a_result_without_its_call_stands_alone_and_long_texts_are_cut() {
        let long = "x".repeat(TEXT_CHARS + 10);
        let line = json_line(&long);
        let items = render(&line);
        let Item::Tool(call) = &items[0] else {
            panic!("{items:#?}")
        };
        assert_eq!(call.name, "result");
        let output = call.output.as_ref().unwrap();
        assert!(
            output.text.ends_with("… 10 more bytes not shown"),
            "{}",
            &output.text[TEXT_CHARS..]
        );
    }

    fn json_line(content: &str) -> String {
        serde_json::json!({"type":"user","message":{"content":[{"type":"tool_result","tool_use_id":"gone","content":content}]}})
            .to_string()
    }
}
