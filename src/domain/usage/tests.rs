use super::*;

fn meter(format: UsageFormat, output: &str) -> UsageMeter {
    let mut meter = UsageMeter::new(format);
    meter.feed(output.as_bytes());
    meter.finish();
    meter
}

const CLAUDE: &str = concat!(
    r#"{"type":"system","subtype":"init","cwd":"/w","session_id":"s1","tools":["Bash"],"model":"claude-sonnet-4-5"}"#,
    "\n",
    r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"text","text":"Looking"}],"usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":0,"output_tokens":5}},"session_id":"s1"}"#,
    "\n",
    r#"{"type":"assistant","message":{"id":"msg_1","role":"assistant","content":[{"type":"tool_use","id":"t1","name":"Bash","input":{"command":"ls"}}],"usage":{"input_tokens":10,"cache_creation_input_tokens":100,"cache_read_input_tokens":0,"output_tokens":5}},"session_id":"s1"}"#,
    "\n",
    r#"{"type":"user","message":{"role":"user","content":[{"type":"tool_result","tool_use_id":"t1","content":"{\"type\":\"result\",\"total_cost_usd\":0}"}]},"session_id":"s1"}"#,
    "\n",
    r#"{"type":"assistant","message":{"id":"msg_2","role":"assistant","content":[{"type":"text","text":"Done"}],"usage":{"input_tokens":3,"cache_creation_input_tokens":0,"cache_read_input_tokens":100,"output_tokens":7}},"session_id":"s1"}"#,
    "\n",
);

const CLAUDE_RESULT: &str = r#"{"type":"result","subtype":"success","is_error":false,"duration_ms":2341,"duration_api_ms":2100,"num_turns":3,"result":"Done.","session_id":"s1","total_cost_usd":0.0421,"usage":{"input_tokens":13,"cache_creation_input_tokens":100,"cache_read_input_tokens":100,"output_tokens":12,"server_tool_use":{"web_search_requests":0},"service_tier":"standard"}}"#;

#[test]
fn claude_streams_an_estimate_per_message_then_its_result_line_is_the_usage() {
    let running = meter(UsageFormat::Claude, CLAUDE);
    // msg_1 counted once though two content blocks repeat its usage; a tool's output that looks like a
    // result line is a string inside a line and counts for nothing.
    assert_eq!(
        running.usage(),
        Usage {
            input_tokens: 13,
            output_tokens: 12,
            cache_read_tokens: 100,
            cache_write_tokens: 100,
            cost_usd: None,
            turns: 2,
        }
    );
    let done = meter(UsageFormat::Claude, &format!("{CLAUDE}{CLAUDE_RESULT}\n"));
    assert_eq!(
        done.usage(),
        Usage {
            input_tokens: 13,
            output_tokens: 12,
            cache_read_tokens: 100,
            cache_write_tokens: 100,
            cost_usd: Some(0.0421),
            turns: 3,
        }
    );
    assert_eq!(done.limit(), None);
}

#[test]
fn lines_split_across_chunks_anywhere_read_the_same() {
    let output = format!("{CLAUDE}{CLAUDE_RESULT}");
    let whole = meter(UsageFormat::Claude, &output).usage();
    for size in [1, 2, 7, 64, 1000] {
        let mut m = UsageMeter::new(UsageFormat::Claude);
        for chunk in output.as_bytes().chunks(size) {
            m.feed(chunk);
        }
        m.finish();
        assert_eq!(m.usage(), whole, "chunks of {size}");
    }
}

#[test]
fn an_overlong_line_is_skipped_and_the_next_line_still_reads() {
    let mut m = UsageMeter::new(UsageFormat::Claude);
    m.feed(&vec![b'{'; MAX_LINE_BYTES + 10]);
    m.feed(b"still the long line\n");
    m.feed(CLAUDE_RESULT.as_bytes());
    m.feed(b"\n");
    assert_eq!(m.usage().cost_usd, Some(0.0421));
}

#[test]
fn claude_rate_limit_rejected_is_a_limit_with_its_reset_time() {
    let output = concat!(
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"allowed_warning","resetsAt":1780000000,"rateLimitType":"five_hour"},"uuid":"u","session_id":"s"}"#,
        "\n",
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1780003600,"rateLimitType":"five_hour"},"uuid":"u","session_id":"s"}"#,
        "\n",
    );
    let limit = meter(UsageFormat::Claude, output).limit().cloned().unwrap();
    assert_eq!(
        limit.resets_at,
        Some(Utc.timestamp_opt(1_780_003_600, 0).unwrap())
    );
    assert!(limit.message.contains("five_hour"), "{}", limit.message);
}

#[test]
fn claude_error_results_naming_a_limit_or_429_or_529_are_limits_and_other_errors_are_not() {
    let result = |text: &str| {
        format!(
            r#"{{"type":"result","subtype":"success","is_error":true,"num_turns":1,"result":{},"total_cost_usd":0.001,"usage":{{"input_tokens":1,"output_tokens":0}}}}"#,
            serde_json::to_string(text).unwrap()
        )
    };
    for text in [
        "Claude AI usage limit reached|1780003600",
        "You've hit your limit · resets 3pm (Europe/Paris)",
        r#"API Error: 429 {"type":"error","error":{"type":"rate_limit_error","message":"Number of request tokens has exceeded your per-minute rate limit"}}"#,
        r#"API Error: 529 {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#,
    ] {
        let m = meter(UsageFormat::Claude, &result(text));
        assert!(m.limit().is_some(), "{text}");
        assert_eq!(m.usage().cost_usd, Some(0.001));
    }
    let old = meter(
        UsageFormat::Claude,
        &result("Claude AI usage limit reached|1780003600"),
    );
    assert_eq!(
        old.limit().unwrap().resets_at,
        Some(Utc.timestamp_opt(1_780_003_600, 0).unwrap())
    );
    for text in [
        "API Error: 500 internal",
        "Error: the tests in src/4290.rs failed",
    ] {
        assert_eq!(
            meter(UsageFormat::Claude, &result(text)).limit(),
            None,
            "{text}"
        );
    }
    // A limit in a successful result's text is the agent's words, not the CLI's error.
    let said = r#"{"type":"result","is_error":false,"result":"I added a rate limit of 429 per hour","usage":{}}"#;
    assert_eq!(meter(UsageFormat::Claude, said).limit(), None);
}

#[test]
fn codex_sums_its_turns_and_counts_cached_input_as_cache_reads() {
    let output = concat!(
        r#"{"type":"thread.started","thread_id":"th_1"}"#,
        "\n",
        r#"{"type":"turn.started"}"#,
        "\n",
        r#"{"type":"item.completed","item":{"id":"item_0","type":"agent_message","text":"{\"type\":\"turn.completed\",\"usage\":{\"input_tokens\":999}}"}}"#,
        "\n",
        r#"{"type":"turn.completed","usage":{"input_tokens":1200,"cached_input_tokens":200,"output_tokens":300}}"#,
        "\n",
        r#"{"type":"turn.completed","usage":{"input_tokens":50,"cached_input_tokens":0,"output_tokens":5,"reasoning_output_tokens":2}}"#,
        "\n",
    );
    assert_eq!(
        meter(UsageFormat::Codex, output).usage(),
        Usage {
            input_tokens: 1050,
            output_tokens: 305,
            cache_read_tokens: 200,
            cache_write_tokens: 0,
            cost_usd: None,
            turns: 2,
        }
    );
}

#[test]
fn codex_errors_naming_a_limit_are_limits() {
    let output = concat!(
        r#"{"type":"error","message":"You've hit your usage limit. Upgrade to Pro or try again later."}"#,
        "\n",
        r#"{"type":"turn.failed","error":{"message":"stream disconnected before completion"}}"#,
        "\n",
    );
    assert!(meter(UsageFormat::Codex, output).limit().is_some());
    let other =
        r#"{"type":"turn.failed","error":{"message":"stream disconnected before completion"}}"#;
    assert_eq!(meter(UsageFormat::Codex, other).limit(), None);
}

#[test]
fn pi_sums_its_assistant_messages_with_their_cost() {
    let message = |role: &str, input: u64, cost: f64| {
        format!(
            r#"{{"type":"message_end","message":{{"role":"{role}","content":[],"api":"anthropic-messages","provider":"anthropic","model":"m","usage":{{"input":{input},"output":4,"cacheRead":2,"cacheWrite":1,"totalTokens":0,"cost":{{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"total":{cost}}}}},"stopReason":"stop","timestamp":1}}}}"#
        )
    };
    let output = format!(
        "{}\n{}\n{}\n{}\n",
        r#"{"type":"session","version":3,"id":"s","timestamp":"t","cwd":"/w"}"#,
        message("assistant", 10, 0.25),
        message("user", 1000, 9.0),
        message("assistant", 5, 0.5),
    );
    assert_eq!(
        meter(UsageFormat::Pi, &output).usage(),
        Usage {
            input_tokens: 15,
            output_tokens: 8,
            cache_read_tokens: 4,
            cache_write_tokens: 2,
            cost_usd: Some(0.75),
            turns: 2,
        }
    );
    let limited = r#"{"type":"message_end","message":{"role":"assistant","content":[],"usage":{"input":0,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":0,"cost":{"total":0}},"stopReason":"error","errorMessage":"429 {\"type\":\"error\",\"error\":{\"type\":\"rate_limit_error\"}}"}}"#;
    assert!(meter(UsageFormat::Pi, limited).limit().is_some());
}

#[test]
fn opencode_sums_its_steps_reasoning_as_output() {
    let step = |input: u64, cost: f64| {
        format!(
            r#"{{"type":"step_finish","timestamp":1,"sessionID":"ses","part":{{"id":"p","sessionID":"ses","messageID":"m","type":"step-finish","reason":"stop","cost":{cost},"tokens":{{"input":{input},"output":3,"reasoning":2,"cache":{{"read":7,"write":1}}}}}}}}"#
        )
    };
    let output = format!("{}\n{}\n", step(100, 0.01), step(20, 0.02));
    let usage = meter(UsageFormat::Opencode, &output).usage();
    assert_eq!(usage.input_tokens, 120);
    assert_eq!(usage.output_tokens, 10);
    assert_eq!(usage.cache_read_tokens, 14);
    assert_eq!(usage.cache_write_tokens, 2);
    assert_eq!(usage.turns, 2);
    assert!((usage.cost_usd.unwrap() - 0.03).abs() < 1e-12);
    let error = r#"{"type":"error","timestamp":1,"sessionID":"ses","error":{"name":"APIError","data":{"message":"Rate limit exceeded: 429 Too Many Requests","statusCode":429}}}"#;
    assert!(meter(UsageFormat::Opencode, error).limit().is_some());
}

#[test]
fn a_pattern_reads_each_matching_line_and_refuses_unknown_groups() {
    let pattern = UsagePattern::new(
        r"tokens: in=(?P<input>[\d,]+) out=(?P<output>\d+) cost=\$(?P<cost>[\d.]+)",
    )
    .unwrap();
    let output =
        "working\ntokens: in=1,200 out=30 cost=$0.50\nmore\ntokens: in=10 out=3 cost=$0.25";
    assert_eq!(
        meter(UsageFormat::Pattern(pattern), output).usage(),
        Usage {
            input_tokens: 1210,
            output_tokens: 33,
            cache_read_tokens: 0,
            cache_write_tokens: 0,
            cost_usd: Some(0.75),
            turns: 0,
        }
    );
    let unknown = UsagePattern::new(r"(?P<inputs>\d+)").unwrap_err();
    assert!(
        unknown.contains("inputs") && unknown.contains("input, output"),
        "{unknown}"
    );
    assert!(UsagePattern::new(r"\d+")
        .unwrap_err()
        .contains("names no group"));
    assert!(UsagePattern::new(r"(").unwrap_err().contains("not a regex"));
}

#[test]
fn formats_are_named_and_an_unknown_name_lists_the_known_ones() {
    for name in UsageFormat::NAMES {
        assert_eq!(UsageFormat::named(name).unwrap().name(), name);
    }
    let e = UsageFormat::named("gpt").unwrap_err();
    assert!(e.contains("claude, codex, pi, opencode, none"), "{e}");
}

#[test]
fn none_reads_nothing() {
    let m = meter(UsageFormat::None, CLAUDE_RESULT);
    assert!(m.usage().is_empty());
    assert!(!m.reads_anything());
}

#[test]
fn usage_round_trips_and_leaves_out_an_unknown_cost() {
    let usage = RunUsage {
        repo: "acme/api".into(),
        profile: "codex".into(),
        usage: Usage {
            input_tokens: 1,
            output_tokens: 2,
            cache_read_tokens: 3,
            cache_write_tokens: 4,
            cost_usd: None,
            turns: 1,
        },
        refused: None,
    };
    let json = serde_json::to_value(&usage).unwrap();
    assert_eq!(json["input_tokens"], 1);
    assert!(json.get("cost_usd").is_none());
    assert_eq!(serde_json::from_value::<RunUsage>(json).unwrap(), usage);
}

#[test]
fn an_output_that_ends_in_the_clis_error_says_so_and_a_later_success_clears_it() {
    let failed = |role: &str, stop: &str| {
        format!(
            r#"{{"type":"message_end","message":{{"role":"{role}","content":[],"usage":{{"input":1,"output":0,"cacheRead":0,"cacheWrite":0,"totalTokens":1,"cost":{{"total":0}}}},"stopReason":"{stop}","errorMessage":"400 credit balance is too low"}}}}"#
        )
    };
    let ended = meter(UsageFormat::Pi, &failed("assistant", "error"));
    assert_eq!(
        ended.ended_in_error(),
        Some("400 credit balance is too low")
    );
    assert_eq!(ended.limit(), None);
    let recovered = format!(
        "{}\n{}\n",
        failed("assistant", "error"),
        failed("assistant", "stop")
    );
    assert_eq!(meter(UsageFormat::Pi, &recovered).ended_in_error(), None);
    let claude = r#"{"type":"result","is_error":true,"result":"Invalid API key","usage":{}}"#;
    assert_eq!(
        meter(UsageFormat::Claude, claude).ended_in_error(),
        Some("Invalid API key")
    );
    assert_eq!(
        meter(UsageFormat::Claude, CLAUDE_RESULT).ended_in_error(),
        None
    );
}

#[test]
fn a_limit_the_cli_got_through_afterwards_is_no_limit() {
    let waited = format!(
        "{}\n{CLAUDE_RESULT}\n",
        r#"{"type":"rate_limit_event","rate_limit_info":{"status":"rejected","resetsAt":1780003600,"rateLimitType":"five_hour"},"uuid":"u","session_id":"s"}"#
    );
    let m = meter(UsageFormat::Claude, &waited);
    assert_eq!(m.limit(), None);
    assert_eq!(m.ended_in_error(), None);
    let retried = concat!(
        r#"{"type":"error","message":"429 Too Many Requests, retrying"}"#,
        "\n",
        r#"{"type":"turn.completed","usage":{"input_tokens":5,"cached_input_tokens":0,"output_tokens":1}}"#,
        "\n",
    );
    assert_eq!(meter(UsageFormat::Codex, retried).limit(), None);
}

/// Each format's usage line with `figure` in one token field (or the cost), as an agent could print it.
fn lines_with(format: &str, tokens: &str, cost: &str) -> String {
    match format {
        "claude" => format!(
            r#"{{"type":"result","subtype":"success","is_error":false,"num_turns":1,"result":"ok","total_cost_usd":{cost},"usage":{{"input_tokens":{tokens},"output_tokens":1}}}}"#
        ),
        "claude-message" => format!(
            r#"{{"type":"assistant","message":{{"id":"m1","role":"assistant","content":[],"usage":{{"input_tokens":{tokens},"output_tokens":1}}}}}}"#
        ),
        "codex" => format!(
            r#"{{"type":"turn.completed","usage":{{"input_tokens":{tokens},"cached_input_tokens":0,"output_tokens":1}}}}"#
        ),
        "pi" => format!(
            r#"{{"type":"message_end","message":{{"role":"assistant","stopReason":"stop","usage":{{"input":{tokens},"output":1,"cacheRead":0,"cacheWrite":0,"cost":{{"total":{cost}}}}}}}}}"#
        ),
        "opencode" => format!(
            r#"{{"type":"step_finish","part":{{"tokens":{{"input":{tokens},"output":1,"reasoning":0,"cache":{{"read":0,"write":0}}}},"cost":{cost}}}}}"#
        ),
        "pattern" => format!("spent {tokens} in, 1 out, ${cost}"),
        other => panic!("no format {other}"),
    }
}

fn format_named(name: &str) -> UsageFormat {
    match name {
        "claude" | "claude-message" => UsageFormat::Claude,
        "pattern" => UsageFormat::Pattern(
            UsagePattern::new(r"spent (?P<input>\S+) in, (?P<output>\d+) out, \$(?P<cost>\S+)")
                .unwrap(),
        ),
        other => UsageFormat::named(other).unwrap(),
    }
}

const FORMATS: [&str; 6] = [
    "claude",
    "claude-message",
    "codex",
    "pi",
    "opencode",
    "pattern",
];

#[test]
fn every_format_refuses_token_counts_out_of_bounds_or_not_counts_and_sums_only_the_good_lines() {
    let bad_tokens = [
        "18446744073709551615",
        "18446744073709551616",
        "1000000001",
        "-5",
        "1.5",
        "1e308",
        r#""100""#,
        "[1]",
    ];
    for format in FORMATS {
        for bad in bad_tokens {
            if format == "pattern" && bad.starts_with(['"', '[']) {
                continue;
            }
            let good = lines_with(format, "100", "0.5");
            let output = format!("{}\n{}\n", lines_with(format, bad, "0.5"), good);
            let m = meter(format_named(format), &output);
            let why = m
                .refused()
                .unwrap_or_else(|| panic!("{format} {bad}: refused"));
            assert!(why.contains("not a count"), "{format} {bad}: {why}");
            let usage = m.usage();
            assert_eq!(
                usage.input_tokens, 100,
                "{format} {bad}: the good line counts, alone"
            );
            assert!(usage.out_of_bounds().is_none(), "{format} {bad}: {usage:?}");
        }
        // At the bound is a count.
        let m = meter(
            format_named(format),
            &lines_with(format, "1000000000", "0.5"),
        );
        assert_eq!(
            (m.refused(), m.usage().input_tokens),
            (None, MAX_TOKENS),
            "{format}"
        );
    }
}

#[test]
fn every_format_with_a_cost_refuses_one_out_of_bounds_negative_or_not_finite() {
    for format in ["claude", "pi", "opencode", "pattern"] {
        for bad in ["1.7e308", "-0.5", "10000.01", r#""1""#, "inf", "NaN"] {
            let json = format != "pattern";
            // JSON has no infinity or NaN: a line that says so is no JSON line (read as nothing, not refused).
            if json && matches!(bad, "inf" | "NaN") || !json && bad.starts_with('"') {
                continue;
            }
            let m = meter(format_named(format), &lines_with(format, "1", bad));
            let why = m
                .refused()
                .unwrap_or_else(|| panic!("{format} {bad}: refused"));
            assert!(why.contains("US dollars"), "{format} {bad}: {why}");
            assert!(
                m.usage().cost_usd.is_none_or(|c| c <= MAX_COST_USD),
                "{format} {bad}"
            );
        }
    }
}

#[test]
fn two_costs_of_1_7e308_never_make_infinity_and_a_run_past_the_bounds_is_refused() {
    // Each line is over the bound: refused, nothing summed (the old meter summed them to +inf, stored as null).
    let line = lines_with("pi", "1", "1.7e308");
    let m = meter(UsageFormat::Pi, &format!("{line}\n{line}\n"));
    assert!(m.refused().is_some());
    assert_eq!(m.usage().cost_usd, None);
    // Each line within the bounds, their sum not: refused, and the sum stops at the bound.
    let line = lines_with("opencode", "600000000", "6000");
    let m = meter(UsageFormat::Opencode, &format!("{line}\n{line}\n"));
    let why = m.refused().expect("refused");
    assert!(why.contains("the run's usage adds up to"), "{why}");
    let usage = m.usage();
    assert_eq!(usage.input_tokens, MAX_TOKENS);
    assert!(usage.out_of_bounds().is_none(), "{usage:?}");
    // Claude Code's messages summed past the bound too.
    let messages: String = (0..3)
        .map(|i| {
            format!(
                r#"{{"type":"assistant","message":{{"id":"m{i}","usage":{{"input_tokens":600000000}}}}}}"#
            ) + "\n"
        })
        .collect();
    let m = meter(UsageFormat::Claude, &messages);
    assert!(m.refused().is_some_and(|w| w.contains("adds up to")));
    assert_eq!(m.usage().input_tokens, MAX_TOKENS);
}

#[test]
fn a_repeated_message_is_replaced_not_added_and_normal_output_is_refused_nothing() {
    let m = meter(UsageFormat::Claude, &format!("{CLAUDE}{CLAUDE_RESULT}\n"));
    assert_eq!(m.refused(), None);
    let line = lines_with("claude-message", "600000000", "0");
    let m = meter(UsageFormat::Claude, &format!("{line}\n{line}\n{line}\n"));
    assert_eq!((m.refused(), m.usage().input_tokens), (None, 600_000_000));
}

#[test]
fn an_old_outcome_past_the_bounds_is_clamped_on_read() {
    let usage = Usage {
        input_tokens: u64::MAX,
        cost_usd: Some(f64::INFINITY),
        turns: u32::MAX,
        ..Usage::default()
    };
    assert!(usage.out_of_bounds().is_some());
    let clamped = usage.clamped();
    assert_eq!(
        (clamped.input_tokens, clamped.cost_usd, clamped.turns),
        (MAX_TOKENS, Some(MAX_COST_USD), MAX_TURNS)
    );
    let nan = Usage {
        cost_usd: Some(f64::NAN),
        ..Usage::default()
    };
    assert_eq!(nan.clamped().cost_usd, None);
}
