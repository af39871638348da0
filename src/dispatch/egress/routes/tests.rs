use secrecy::ExposeSecret;
use serde_json::{json, Value};

use super::*;
use crate::config::profiles::presets;
use crate::dispatch::egress::gateway::Gateway;

const GATEWAY: &str = "http://127.0.0.1:3128";

fn pairs(list: &[(&str, &str)]) -> Vec<(String, String)> {
    list.iter()
        .map(|(k, v)| ((*k).into(), (*v).into()))
        .collect()
}

fn strings(list: &[&str]) -> Vec<String> {
    list.iter().map(|s| (*s).to_owned()).collect()
}

fn preset(name: &str) -> crate::config::profiles::AgentProfile {
    presets()
        .into_iter()
        .find(|p| p.name == name)
        .expect("a preset")
}

/// The gateway of a preset run with `passed` and the operator's files.
fn gateway(
    name: &str,
    passed: &[(&str, &str)],
    operator: &OperatorFiles,
) -> Result<Gateway, String> {
    let profile = preset(name);
    Gateway::for_run(
        profile.model_route,
        &profile.env,
        &pairs(passed),
        &profile.command,
        operator,
    )
    .map(|g| g.expect("a gateway"))
}

fn env<'a>(pointed: &'a Pointed, name: &str) -> Option<&'a str> {
    pointed
        .env
        .iter()
        .find(|(k, _)| k == name)
        .map(|(_, v)| v.as_str())
}

#[test]
fn every_preset_that_passes_its_key_gets_the_gateway_and_only_a_placeholder() {
    for (name, route, key_var) in [
        ("claude", ModelRoute::BaseUrlVariable, "ANTHROPIC_API_KEY"),
        ("pi", ModelRoute::PiModels, "ANTHROPIC_API_KEY"),
        ("opencode", ModelRoute::OpencodeConfig, "ANTHROPIC_API_KEY"),
        ("codex", ModelRoute::CodexConfig, "CODEX_API_KEY"),
    ] {
        let profile = preset(name);
        assert_eq!(profile.model_route, route, "{name}");
        let g = gateway(name, &[(key_var, "sk-real-key")], &OperatorFiles::default()).unwrap();
        assert_eq!(g.key.expose_secret(), "sk-real-key");
        let mut argv = profile.command.clone();
        let pointed = g.point(GATEWAY, &mut argv);
        assert_eq!(env(&pointed, key_var), Some(PLACEHOLDER_KEY), "{name}");
        let everything = format!("{pointed:?} {argv:?}");
        assert!(!everything.contains("sk-real-key"), "{name}: {everything}");
        assert!(
            everything.contains(GATEWAY),
            "{name} is not pointed at the gateway: {everything}"
        );
    }
}

#[test]
fn pi_gets_a_models_json_of_its_own_with_only_its_provider_at_the_gateway() {
    let operator = OperatorFiles {
        pi_models: Some(
            json!({ "providers": {
                "anthropic": {
                    "baseUrl": "https://llm.example.com/anthropic",
                    "apiKey": "sk-literal-in-models-json",
                    "headers": { "x-team": "infra" },
                    "models": [{ "id": "claude-house" }]
                },
                "openrouter": { "baseUrl": "https://openrouter.ai/api/v1", "apiKey": "sk-or-literal" }
            }})
            .to_string(),
        ),
        pi_settings: Some(r#"{"defaultModel":"claude-house"}"#.into()),
        opencode_file: None,
    };
    let g = gateway("pi", &[("ANTHROPIC_API_KEY", "sk-real")], &operator).unwrap();
    assert_eq!(g.base.as_str(), "https://llm.example.com/anthropic");
    assert_eq!(
        g.upstream("/anthropic/v1/messages"),
        "https://llm.example.com/anthropic/v1/messages"
    );
    let pointed = g.point(GATEWAY, &mut Vec::new());
    let files: std::collections::BTreeMap<_, _> = pointed.pi_files.iter().cloned().collect();
    let models: Value = serde_json::from_str(&files["models.json"]).unwrap();
    assert_eq!(
        models,
        json!({ "providers": { "anthropic": {
            "baseUrl": "http://127.0.0.1:3128/anthropic",
            "apiKey": "ANTHROPIC_API_KEY",
            "headers": { "x-team": "infra" },
            "models": [{ "id": "claude-house" }]
        }}})
    );
    assert_eq!(files["settings.json"], r#"{"defaultModel":"claude-house"}"#);
    assert!(!format!("{pointed:?}").contains("sk-"), "{pointed:?}");

    // No operator directory: the provider's default, still a directory of its own.
    let g = gateway(
        "pi",
        &[("ANTHROPIC_API_KEY", "k")],
        &OperatorFiles::default(),
    )
    .unwrap();
    assert_eq!(g.base.as_str(), "https://api.anthropic.com/");
    let pointed = g.point(GATEWAY, &mut Vec::new());
    assert_eq!(
        pointed.pi_files,
        vec![(
            "models.json",
            json!({ "providers": { "anthropic": { "baseUrl": GATEWAY, "apiKey": "ANTHROPIC_API_KEY" }}})
                .to_string()
        )]
    );
}

#[test]
fn a_malformed_or_hostile_pi_models_json_is_a_clear_error() {
    for (models, expected) in [
        ("{ not json", "PI_CODING_AGENT_DIR/models.json is not JSON"),
        (
            "[1, 2]",
            "PI_CODING_AGENT_DIR/models.json is not a JSON object",
        ),
        (
            r#"{"providers": []}"#,
            "providers in PI_CODING_AGENT_DIR/models.json is not an object",
        ),
        (
            r#"{"providers": {"anthropic": "x"}}"#,
            "anthropic in its providers is not an object",
        ),
        (
            r#"{"providers": {"anthropic": {"baseUrl": 3}}}"#,
            "providers.anthropic.baseUrl in PI_CODING_AGENT_DIR/models.json is not a string",
        ),
        (
            r#"{"providers": {"anthropic": {"baseUrl": "file:///etc/passwd"}}}"#,
            "providers.anthropic.baseUrl in PI_CODING_AGENT_DIR/models.json is not an http(s) URL",
        ),
        (
            r#"{"providers": {"anthropic": {"baseUrl": "https://user:pw@llm.example.com"}}}"#,
            "is not an http(s) URL without credentials",
        ),
    ] {
        let operator = OperatorFiles {
            pi_models: Some(models.into()),
            ..OperatorFiles::default()
        };
        let refused = gateway("pi", &[("ANTHROPIC_API_KEY", "k")], &operator).unwrap_err();
        assert!(refused.contains(expected), "{models}: {refused}");
        assert!(!refused.contains("user:pw"), "{refused}");
    }
}

#[test]
fn opencode_keeps_the_operators_configuration_with_its_provider_at_the_gateway() {
    let content = json!({
        "$schema": "https://opencode.ai/config.json",
        "model": "anthropic/claude-house",
        "provider": {
            "anthropic": { "options": { "baseURL": "http://10.0.0.5:8080/v1", "apiKey": "sk-literal" }, "models": {} },
            "openai": { "options": { "baseURL": "https://api.openai.com/v1" } }
        }
    })
    .to_string();
    let g = gateway(
        "opencode",
        &[
            ("ANTHROPIC_API_KEY", "sk-real"),
            ("OPENCODE_CONFIG_CONTENT", &content),
        ],
        &OperatorFiles::default(),
    )
    .unwrap();
    assert_eq!(g.base.as_str(), "http://10.0.0.5:8080/v1");
    let pointed = g.point(GATEWAY, &mut Vec::new());
    let merged: Value =
        serde_json::from_str(env(&pointed, "OPENCODE_CONFIG_CONTENT").unwrap()).unwrap();
    assert_eq!(
        merged,
        json!({
            "$schema": "https://opencode.ai/config.json",
            "model": "anthropic/claude-house",
            "provider": {
                "anthropic": {
                    "options": { "baseURL": "http://127.0.0.1:3128/v1", "apiKey": PLACEHOLDER_KEY },
                    "models": {}
                },
                "openai": { "options": { "baseURL": "https://api.openai.com/v1" } }
            }
        })
    );

    // Nothing configured: OpenCode's own default base (with /v1), and a configuration that points it here.
    let g = gateway(
        "opencode",
        &[("ANTHROPIC_API_KEY", "k")],
        &OperatorFiles::default(),
    )
    .unwrap();
    assert_eq!(g.base.as_str(), "https://api.anthropic.com/v1");
    let pointed = g.point(GATEWAY, &mut Vec::new());
    assert_eq!(
        serde_json::from_str::<Value>(env(&pointed, "OPENCODE_CONFIG_CONTENT").unwrap()).unwrap(),
        json!({ "provider": { "anthropic": { "options": {
            "baseURL": "http://127.0.0.1:3128/v1", "apiKey": PLACEHOLDER_KEY
        }}}})
    );

    // The base in the file OPENCODE_CONFIG names (JSON with comments and trailing commas), when the content has
    // none.
    let operator = OperatorFiles {
        opencode_file: Some(
            "{\n  // the house gateway\n  \"provider\": { \"anthropic\": { \"options\": {\n    \
             \"baseURL\": \"https://llm.example.com/v1\", /* no key here */\n  }, }, },\n}\n"
                .into(),
        ),
        ..OperatorFiles::default()
    };
    let g = gateway("opencode", &[("ANTHROPIC_API_KEY", "k")], &operator).unwrap();
    assert_eq!(g.base.as_str(), "https://llm.example.com/v1");
}

#[test]
fn a_malformed_or_hostile_opencode_configuration_is_a_clear_error() {
    for (content, expected) in [
        ("{\"provider\": ", "OPENCODE_CONFIG_CONTENT is not JSON"),
        (
            "\"a string\"",
            "OPENCODE_CONFIG_CONTENT is not a JSON object",
        ),
        (
            r#"{"provider": 1}"#,
            "provider in OPENCODE_CONFIG_CONTENT is not an object",
        ),
        (
            r#"{"provider": {"anthropic": {"options": []}}}"#,
            "options in provider.anthropic in OPENCODE_CONFIG_CONTENT is not an object",
        ),
        (
            r#"{"provider": {"anthropic": {"options": {"baseURL": {"env": "X"}}}}}"#,
            "provider.anthropic.options.baseURL in OPENCODE_CONFIG_CONTENT is not a string",
        ),
        (
            r#"{"provider": {"anthropic": {"options": {"baseURL": "{env:MY_GATEWAY}"}}}}"#,
            "provider.anthropic.options.baseURL in OPENCODE_CONFIG_CONTENT is not an http(s) URL",
        ),
    ] {
        let refused = gateway(
            "opencode",
            &[
                ("ANTHROPIC_API_KEY", "k"),
                ("OPENCODE_CONFIG_CONTENT", content),
            ],
            &OperatorFiles::default(),
        )
        .unwrap_err();
        assert!(refused.contains(expected), "{content}: {refused}");
    }
    let operator = OperatorFiles {
        opencode_file: Some("{ \"provider\": [] }".into()),
        ..OperatorFiles::default()
    };
    let refused = gateway("opencode", &[("ANTHROPIC_API_KEY", "k")], &operator).unwrap_err();
    assert!(
        refused.contains("provider in the file OPENCODE_CONFIG names is not an object"),
        "{refused}"
    );
}

#[test]
fn codex_is_pointed_on_its_command_line_and_the_operators_endpoint_taken_out() {
    // The preset: OPENAI_BASE_URL is the real base; Codex reads no variable, so `-c` points it.
    let g = gateway(
        "codex",
        &[
            ("CODEX_API_KEY", "sk-real"),
            ("OPENAI_BASE_URL", "http://127.0.0.1:9999/v1"),
        ],
        &OperatorFiles::default(),
    )
    .unwrap();
    assert_eq!(
        g.upstream("/v1/responses"),
        "http://127.0.0.1:9999/v1/responses"
    );
    let mut argv = preset("codex").command;
    let pointed = g.point(GATEWAY, &mut argv);
    assert_eq!(
        argv[..3],
        strings(&[
            "codex",
            "-c",
            "openai_base_url=\"http://127.0.0.1:3128/v1\""
        ])
    );
    assert_eq!(argv[3..], preset("codex").command[1..]);
    assert_eq!(
        env(&pointed, "OPENAI_BASE_URL"),
        Some("http://127.0.0.1:3128/v1")
    );

    // A profile of your own that names its endpoint with `-c` (quoted TOML, or bare): that is the real base, and
    // the agent's command line holds only the gateway.
    for (args, base) in [
        (
            vec!["-c", "openai_base_url=\"https://llm.example.com/v1\""],
            "https://llm.example.com/v1",
        ),
        (
            vec!["--config=openai_base_url=https://bare.example.com/v1"],
            "https://bare.example.com/v1",
        ),
        (
            vec![
                "--config",
                " openai_base_url = 'https://single.example.com/v1'",
            ],
            "https://single.example.com/v1",
        ),
    ] {
        let mut command = strings(&["codex", "exec", "--json"]);
        command.extend(args.iter().map(|a| (*a).to_owned()));
        command.extend(strings(&["-c", "analytics.enabled=false", "-"]));
        let g = Gateway::for_run(
            ModelRoute::CodexConfig,
            &strings(&["CODEX_API_KEY"]),
            &pairs(&[("CODEX_API_KEY", "k")]),
            &command,
            &OperatorFiles::default(),
        )
        .unwrap()
        .unwrap();
        assert_eq!(g.base.as_str(), base);
        let mut argv = command.clone();
        g.point(GATEWAY, &mut argv);
        assert_eq!(
            argv,
            strings(&[
                "codex",
                "-c",
                "openai_base_url=\"http://127.0.0.1:3128/v1\"",
                "exec",
                "--json",
                "-c",
                "analytics.enabled=false",
                "-"
            ]),
            "{args:?}"
        );
    }
    let refused = Gateway::for_run(
        ModelRoute::CodexConfig,
        &strings(&["CODEX_API_KEY"]),
        &pairs(&[("CODEX_API_KEY", "k")]),
        &strings(&["codex", "exec", "-c", "openai_base_url=[1]", "-"]),
        &OperatorFiles::default(),
    )
    .unwrap_err();
    assert!(
        refused.contains("openai_base_url=… in the profile's command is not a string"),
        "{refused}"
    );
    // Codex's route serves OpenAI only: an Anthropic key alone gets no gateway.
    assert!(Gateway::for_run(
        ModelRoute::CodexConfig,
        &strings(&["ANTHROPIC_API_KEY"]),
        &pairs(&[("ANTHROPIC_API_KEY", "k")]),
        &strings(&["codex", "exec", "-"]),
        &OperatorFiles::default(),
    )
    .unwrap()
    .is_none());
}

#[test]
fn jsonc_loses_its_comments_and_trailing_commas_but_not_its_strings() {
    let text = "{ \"a\": \"http://x//y\", // comment\n \"b\": \"/* kept */\", /* gone */ \"c\": [1, 2,], }";
    let plain: Value = serde_json::from_str(&strip_jsonc(text)).unwrap();
    assert_eq!(
        plain,
        json!({ "a": "http://x//y", "b": "/* kept */", "c": [1, 2] })
    );
    assert_eq!(
        strip_jsonc(r#"{"q": "say \"hi\", // not a comment"}"#),
        r#"{"q": "say \"hi\", // not a comment"}"#
    );
}
