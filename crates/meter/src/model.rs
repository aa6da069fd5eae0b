//! The model names the meter reads: the one a request body asks for
//! ([`request_model`]) and the one a response says answered
//! ([`response_model`]).

use super::json;

/// Longest `model` kept from a request body, in characters.
pub const MODEL_MAX_CHARS: usize = 200;

/// Longest conversation or response id kept, in bytes: a longer one is
/// not an id any API hands out.
pub const ID_MAX_BYTES: usize = 256;

/// The `model` a JSON request body names at its top level (every API that
/// has one there: OpenAI's, Anthropic's, Ollama's, TGI's `/v1`...), cut to
/// [`MODEL_MAX_CHARS`]; `None` when the body is not one JSON object, has no
/// `model`, or its `model` is not a string of valid UTF-8.
///
/// Read with the metering reader, which skips the rest (the messages,
/// usually nearly all of the body) scanning sixteen bytes at a time and
/// without checking their UTF-8; a `model` key repeated is read each time,
/// the last one kept.
pub fn request_model(body: &[u8]) -> Option<String> {
    let mut model = None;
    json::read(body, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match key {
                b"model" => {
                    model = r
                        .string_or_null(|s| {
                            let s = std::str::from_utf8(s).ok()?;
                            Some(cut(s))
                        })?
                        .flatten();
                }
                _ => r.skip()?,
            }
        }
        Ok(())
    })
    .ok()?;
    model
}

/// The model a response event (or a whole non-streamed body) says
/// answered, cut to [`MODEL_MAX_CHARS`]: its top-level `model` (OpenAI,
/// Ollama, llama.cpp, the calls that generate nothing), `modelVersion`
/// (Gemini) or `model_name` (Triton), or the `model` of its `message`
/// (Anthropic's `message_start`) or `response` (OpenAI Responses'
/// lifecycle events), the first of them it names: what follows it is not
/// read. `None` when it names none (TGI's and SGLang's native APIs), or the
/// event is not a JSON object.
pub fn response_model(data: &[u8]) -> Option<String> {
    let mut model = None;
    let _ = json::read(data, |r| {
        if r.peek()? != b'{' {
            return r.skip();
        }
        r.open_object()?;
        while let Some(key) = r.key()? {
            let named = matches!(key, b"model" | b"modelVersion" | b"model_name");
            let nested = matches!(key, b"message" | b"response");
            // The first name found is the answer: the rest is not read.
            if named {
                if let Some(name) = model_name(r)? {
                    model = Some(name);
                    r.leave_the_rest();
                    return Ok(());
                }
            } else if nested && r.peek()? == b'{' {
                r.open_object()?;
                while let Some(key) = r.key()? {
                    if key == b"model" {
                        if let Some(name) = model_name(r)? {
                            model = Some(name);
                            r.leave_the_rest();
                            return Ok(());
                        }
                    } else {
                        r.skip()?;
                    }
                }
            } else {
                r.skip()?;
            }
        }
        Ok(())
    });
    model
}

/// The id a Responses API response names: the top-level `id` of a whole
/// response object, or the `id` of the `response` of a streamed lifecycle
/// event (`response.created` first); a non-empty string of valid UTF-8 of
/// at most [`ID_MAX_BYTES`] bytes, else none.
pub fn response_id(data: &[u8]) -> Option<String> {
    let mut id = None;
    let _ = json::read(data, |r| {
        if r.peek()? != b'{' {
            return r.skip();
        }
        r.open_object()?;
        while let Some(key) = r.key()? {
            let (is_id, is_response) = (key == b"id", key == b"response");
            match () {
                () if is_id => {
                    id = id_value(r)?;
                    if id.is_some() {
                        r.leave_the_rest();
                        return Ok(());
                    }
                }
                () if is_response && r.peek()? == b'{' => {
                    r.open_object()?;
                    while let Some(key) = r.key()? {
                        if key == b"id" {
                            id = id_value(r)?;
                            if id.is_some() {
                                r.leave_the_rest();
                                return Ok(());
                            }
                        } else {
                            r.skip()?;
                        }
                    }
                }
                _ => r.skip()?,
            }
        }
        Ok(())
    });
    id
}

/// An id: a non-empty string of valid UTF-8 of at most [`ID_MAX_BYTES`].
fn id_value(r: &mut json::Reader<'_>) -> Result<Option<String>, json::Error> {
    if r.peek()? != b'"' {
        r.skip()?;
        return Ok(None);
    }
    Ok(r.string_or_null(|s| {
        let s = std::str::from_utf8(s).ok();
        s.filter(|s| !s.is_empty() && s.len() <= ID_MAX_BYTES)
            .map(str::to_owned)
    })?
    .flatten())
}

/// `name` cut to its first [`MODEL_MAX_CHARS`] characters, copied once
/// (a name of no more bytes than that has no more characters).
pub(crate) fn cut(name: &str) -> String {
    if name.len() <= MODEL_MAX_CHARS {
        return name.to_owned();
    }
    let end = name
        .char_indices()
        .nth(MODEL_MAX_CHARS)
        .map_or(name.len(), |(at, _)| at);
    name[..end].to_owned()
}

/// A model name: a non-empty string of valid UTF-8, cut to
/// [`MODEL_MAX_CHARS`].
fn model_name(r: &mut json::Reader<'_>) -> Result<Option<String>, json::Error> {
    if r.peek()? != b'"' {
        r.skip()?;
        return Ok(None);
    }
    Ok(r.string_or_null(|s| {
        let s = std::str::from_utf8(s).ok().filter(|s| !s.is_empty())?;
        Some(cut(s))
    })?
    .flatten())
}

#[cfg(test)]
mod tests {
    use super::{MODEL_MAX_CHARS, request_model, response_id, response_model};

    #[test]
    fn the_id_a_responses_response_names() {
        for (event, id) in [
            (
                &br#"{"type":"response.created","sequence_number":0,"response":{"id":"resp_1","object":"response","model":"gpt"}}"#[..],
                Some("resp_1"),
            ),
            (br#"{"id":"resp_2","object":"response","output":[]}"#, Some("resp_2")),
            (br#"{"type":"response.output_text.delta","item_id":"msg_1","delta":"a"}"#, None),
            (br#"{"id":""}"#, None),
            (br#"{"id":7}"#, None),
            (b"not json", None),
        ] {
            assert_eq!(response_id(event).as_deref(), id, "{}", String::from_utf8_lossy(event));
        }
    }

    #[test]
    fn the_model_a_response_names() {
        for (event, model) in [
            (
                &br#"{"id":"c","object":"chat.completion.chunk","created":1,"model":"meta-llama/Llama-3.1-8B-Instruct","choices":[]}"#[..],
                Some("meta-llama/Llama-3.1-8B-Instruct"),
            ),
            (
                br#"{"type":"message_start","message":{"id":"m","type":"message","role":"assistant","model":"claude-sonnet-4-5","content":[]}}"#,
                Some("claude-sonnet-4-5"),
            ),
            (
                br#"{"type":"response.created","response":{"id":"r","object":"response","model":"gpt-4o-2024-08-06","output":[]}}"#,
                Some("gpt-4o-2024-08-06"),
            ),
            (
                br#"{"candidates":[{"content":{"parts":[{"text":"Hi"}]}}],"modelVersion":"gemini-2.5-flash"}"#,
                Some("gemini-2.5-flash"),
            ),
            (br#"{"model_name":"ensemble","text_output":"a"}"#, Some("ensemble")),
            (
                br#"{"object":"list","data":[{"embedding":[0.1,0.2]}],"model":"e5","usage":{"prompt_tokens":3}}"#,
                Some("e5"),
            ),
            (br#"{"token":{"id":1,"text":"a"},"generated_text":null}"#, None),
            (br#"{"choices":[{"message":{"model":"inner"}}]}"#, None),
            (br#"{"model":""}"#, None),
            (br#"{"model":7}"#, None),
            (b"[DONE]", None),
            (b"[[0.1,0.2]]", None),
        ] {
            assert_eq!(
                response_model(event).as_deref(),
                model,
                "{}",
                String::from_utf8_lossy(event)
            );
        }
    }

    #[test]
    fn reads_the_top_level_model_only() {
        let chat = br#"{"messages":[{"role":"user","content":"say \"model\": \"x\"","model":"inner"}],"model":"gpt-4o","stream":true}"#;
        assert_eq!(request_model(chat).as_deref(), Some("gpt-4o"));
        assert_eq!(
            request_model(b" \n{\"model\" : \"m\"}\n").as_deref(),
            Some("m")
        );
        assert_eq!(request_model(br#"{"messages":[{"model":"inner"}]}"#), None);
        // Escapes in the key and the value.
        assert_eq!(
            request_model(br#"{"mod\u0065l":"caf\u00e9\/1"}"#).as_deref(),
            Some("café/1")
        );
        // The last of repeated keys.
        assert_eq!(
            request_model(br#"{"model":"a","model":"b"}"#).as_deref(),
            Some("b")
        );
    }

    #[test]
    fn anything_else_names_no_model() {
        for body in [
            &br#"{"model":null}"#[..],
            br#"{"model":5}"#,
            br#"{"model":["a"]}"#,
            br#"["gpt-4o"]"#,
            br#""gpt-4o""#,
            br#"{"model":"gpt-4o","#,
            br#"{"model":"gpt-4o"} x"#,
            b"",
            b"model=gpt-4o",
            b"{\"model\":\"\xff\xfe\"}",
        ] {
            assert_eq!(
                request_model(body),
                None,
                "{}",
                String::from_utf8_lossy(body)
            );
        }
    }

    #[test]
    fn invalid_utf8_elsewhere_does_not_hide_the_model() {
        assert_eq!(
            request_model(b"{\"messages\":[\"\xff\"],\"model\":\"m\"}").as_deref(),
            Some("m")
        );
    }

    #[test]
    fn a_name_is_cut_at_its_characters_not_its_bytes() {
        let by_chars = |s: &str| s.chars().take(MODEL_MAX_CHARS).collect::<String>();
        let names = [
            String::new(),
            "gpt-4o".to_owned(),
            "a".repeat(MODEL_MAX_CHARS),
            "a".repeat(MODEL_MAX_CHARS + 1),
            // More bytes than the limit, no more characters: kept whole.
            "é".repeat(MODEL_MAX_CHARS),
            "é".repeat(MODEL_MAX_CHARS + 1),
            format!("{}日本", "a".repeat(MODEL_MAX_CHARS - 1)),
        ];
        for name in names {
            assert_eq!(super::cut(&name), by_chars(&name), "{name}");
        }
    }

    #[test]
    fn long_models_are_cut() {
        let long = "é".repeat(MODEL_MAX_CHARS + 50);
        let body = format!(r#"{{"model":"{long}"}}"#);
        let got = request_model(body.as_bytes()).unwrap();
        assert_eq!(got.chars().count(), MODEL_MAX_CHARS);
        assert!(long.starts_with(&got));
    }

    /// On well-formed bodies it agrees with what the proxy used before, a
    /// `serde_json` parse into a struct with one `model` field.
    #[test]
    fn agrees_with_serde_json_on_request_bodies() {
        #[derive(serde::Deserialize)]
        struct Head {
            model: Option<String>,
        }
        let bodies = [
            r#"{"model":"llama-3.1-8b","messages":[{"role":"system","content":"You are \"helpful\"\n"},{"role":"user","content":[{"type":"text","text":"hi"}]}],"max_tokens":64,"temperature":0.7,"stream":true,"stream_options":{"include_usage":true}}"#,
            r#"{"model":"claude-sonnet-4","max_tokens":1024,"system":[{"type":"text","text":"x","cache_control":{"type":"ephemeral"}}],"messages":[{"role":"user","content":"héllo ☃"}]}"#,
            r#"{"prompt":"once upon","model":"qwen2.5","options":{"num_predict":-1,"stop":["\n\n"]},"stream":false}"#,
            r#"{"inputs":"x","parameters":{"max_new_tokens":20}}"#,
            r#"{"model":"","messages":[]}"#,
            "{\n  \"model\": \"pretty\",\n  \"messages\": []\n}",
        ];
        for body in bodies {
            let serde = serde_json::from_str::<Head>(body)
                .ok()
                .and_then(|h| h.model);
            assert_eq!(request_model(body.as_bytes()), serde, "{body}");
        }
    }
}
