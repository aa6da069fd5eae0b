//! The turn of bodies as each API writes them, and bodies it cannot read.

use super::*;

fn turn(api: Api, body: &str) -> Turn {
    read_request(api, body.as_bytes()).turn
}

#[test]
fn chat_completions_turns() {
    let first = r#"{"model":"m","messages":[{"role":"system","content":"be brief"},{"role":"user","content":"hi"}]}"#;
    assert_eq!(turn(Api::OpenAi, first), Turn::First);
    let follow = r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":"and?"}],"model":"m"}"#;
    assert_eq!(turn(Api::OpenAi, follow), Turn::FollowUp);
    let tool = r#"{"messages":[{"role":"user","content":"weather?"},{"role":"assistant","tool_calls":[{"id":"c1","type":"function","function":{"name":"w","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"sunny"}]}"#;
    assert_eq!(turn(Api::OpenAi, tool), Turn::ToolResult);
    // Ollama's /api/chat is read the same way.
    assert_eq!(turn(Api::Ollama, tool), Turn::ToolResult);
    // A legacy completion has no conversation.
    assert_eq!(
        turn(Api::OpenAi, r#"{"model":"m","prompt":"hi"}"#),
        Turn::None
    );
}

#[test]
fn anthropic_messages_turns() {
    let first = r#"{"model":"claude","max_tokens":10,"messages":[{"role":"user","content":[{"type":"text","text":"hi"}]}]}"#;
    assert_eq!(turn(Api::Anthropic, first), Turn::First);
    let tool = r#"{"messages":[{"role":"user","content":"weather?"},{"role":"assistant","content":[{"type":"tool_use","id":"t1","name":"w","input":{}}]},{"content":[{"type":"tool_result","tool_use_id":"t1","content":"sunny"}],"role":"user"}]}"#;
    assert_eq!(turn(Api::Anthropic, tool), Turn::ToolResult);
    let follow = r#"{"messages":[{"role":"user","content":"hi"},{"role":"assistant","content":"hello"},{"role":"user","content":[{"type":"text","text":"more"}]}]}"#;
    assert_eq!(turn(Api::Anthropic, follow), Turn::FollowUp);
}

#[test]
fn responses_turns_and_ids() {
    let first = read_request(Api::Responses, br#"{"model":"gpt","input":"hi"}"#);
    assert_eq!(
        (first.turn, first.model.as_deref()),
        (Turn::First, Some("gpt"))
    );
    let chained = read_request(
        Api::Responses,
        br#"{"previous_response_id":"resp_1","input":"and?"}"#,
    );
    assert_eq!(chained.turn, Turn::FollowUp);
    assert_eq!(chained.previous_response_id.as_deref(), Some("resp_1"));
    let tool = read_request(
        Api::Responses,
        br#"{"previous_response_id":"resp_2","input":[{"type":"function_call_output","call_id":"c","output":"42"}]}"#,
    );
    assert_eq!(tool.turn, Turn::ToolResult);
    // The whole history in `input`, no id: its output items continue it.
    let stateless = r#"{"input":[{"role":"user","content":"q"},{"type":"function_call","call_id":"c","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c","output":"1"},{"role":"user","content":"thanks"}]}"#;
    assert_eq!(turn(Api::Responses, stateless), Turn::FollowUp);
    let conv = read_request(
        Api::Responses,
        br#"{"conversation":{"id":"conv_9"},"input":"hi"}"#,
    );
    assert_eq!(
        (conv.turn, conv.conversation.as_deref()),
        (Turn::FollowUp, Some("conv_9"))
    );
    let conv = read_request(Api::Responses, br#"{"conversation":"conv_8","input":[]}"#);
    assert_eq!(conv.conversation.as_deref(), Some("conv_8"));
    // An id longer than any API hands out is not kept.
    let long = format!(
        r#"{{"previous_response_id":"{}","input":"x"}}"#,
        "r".repeat(300)
    );
    assert_eq!(
        read_request(Api::Responses, long.as_bytes()).previous_response_id,
        None
    );
}

#[test]
fn gemini_turns() {
    let first = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]}]}"#;
    assert_eq!(turn(Api::Gemini, first), Turn::First);
    let tool = r#"{"contents":[{"role":"user","parts":[{"text":"w?"}]},{"role":"model","parts":[{"functionCall":{"name":"w","args":{}}}]},{"role":"user","parts":[{"functionResponse":{"name":"w","response":{"t":1}}}]}]}"#;
    assert_eq!(turn(Api::Gemini, tool), Turn::ToolResult);
    let follow = r#"{"contents":[{"role":"user","parts":[{"text":"hi"}]},{"role":"model","parts":[{"text":"yo"}]},{"role":"user","parts":[{"text":"?"}]}]}"#;
    assert_eq!(turn(Api::Gemini, follow), Turn::FollowUp);
}

#[test]
fn apis_without_a_conversation_are_none() {
    for api in [
        Api::Tgi,
        Api::LlamaCpp,
        Api::Sglang,
        Api::Triton,
        Api::NonGenerating,
    ] {
        let facts = read_request(
            api,
            br#"{"input":["a","b"],"messages":[{"role":"assistant"}]}"#,
        );
        assert_eq!(
            (facts.turn, facts.unreadable),
            (Turn::None, false),
            "{api:?}"
        );
    }
}

#[test]
fn bodies_it_cannot_read_are_none_and_told_apart() {
    let deep = format!("{{\"messages\":{}{}}}", "[".repeat(200), "]".repeat(200));
    for body in [
        "not json",
        r#"{"messages":[{"role":"user""#,
        deep.as_str(),
        "[1,2]",
    ] {
        let facts = read_request(Api::OpenAi, body.as_bytes());
        assert_eq!((facts.turn, facts.unreadable), (Turn::None, true), "{body}");
    }
    // Every cut of a good body: never a panic, and never a kind it does
    // not have.
    let tool = br#"{"model":"m","messages":[{"role":"user","content":"x"},{"role":"tool","content":"y"}]}"#;
    for cut in 0..tool.len() {
        let facts = read_request(Api::OpenAi, &tool[..cut]);
        assert_eq!(facts.turn, Turn::None, "cut at {cut}");
    }
    assert_eq!(
        turn(Api::OpenAi, std::str::from_utf8(tool).unwrap()),
        Turn::ToolResult
    );
}

#[test]
fn a_megabyte_prompt_of_500_messages_is_read_without_its_content() {
    let text = "x".repeat(2_000);
    let mut body = String::from(r#"{"model":"m","messages":["#);
    for i in 0..500 {
        let role = if i % 2 == 0 { "user" } else { "assistant" };
        if i > 0 {
            body.push(',');
        }
        body.push_str(&format!(
            r#"{{"role":"{role}","content":"{text} \"quoted\" {i}"}}"#
        ));
    }
    body.push_str(r#",{"role":"tool","content":"done"}]}"#);
    assert!(body.len() > 1_000_000);
    let facts = read_request(Api::OpenAi, body.as_bytes());
    assert_eq!(
        (facts.turn, facts.model.as_deref()),
        (Turn::ToolResult, Some("m"))
    );
}
