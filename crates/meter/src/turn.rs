//! What a request body tells of the request: the `model` it asks for and
//! its place in a conversation ([`Turn`]), read in one pass that skips the
//! content (docs/metrics.md, "Sessions and turns").
//!
//! The turn is read from the body alone, so it is right on any replica and
//! needs no table:
//!
//! - chat completions, Ollama's `/api/chat` and Anthropic Messages: the
//!   `messages`; an `assistant` message is an earlier model turn; the last
//!   message is a tool's result when its role is `tool` (or the legacy
//!   `function`), or, in Anthropic's, a `user` message with a
//!   `tool_result` block;
//! - Responses: a `previous_response_id` or a `conversation` continues a
//!   conversation, as do output items in `input` (an `assistant` message,
//!   a function or tool call, a reasoning item); the last item of `input`
//!   is a tool's result when it is a `function_call_output` or another
//!   `*_call_output`;
//! - Gemini: the `contents`; a `model` content is an earlier model turn;
//!   the last content is a tool's result when it has a `functionResponse`
//!   part.
//!
//! Any other API has no conversation: [`Turn::None`]. So is a body it
//! cannot read (not JSON, nested past the reader's bound, cut short),
//! which [`RequestFacts::unreadable`] tells apart.

use crate::api::Api;
use crate::json::{self, Error, Reader};
use crate::model::{self, ID_MAX_BYTES};

/// A request's place in its conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash)]
pub enum Turn {
    /// The conversation has no earlier model turn.
    First,
    /// The newest input is the result of a tool call.
    ToolResult,
    /// Any other request that continues a conversation.
    FollowUp,
    /// An API without a conversation, or a body that could not be read.
    #[default]
    None,
}

impl Turn {
    /// Every kind, in the order the docs list them.
    pub const ALL: [Turn; 4] = [Turn::First, Turn::ToolResult, Turn::FollowUp, Turn::None];

    /// The `turn` label value.
    pub fn as_str(self) -> &'static str {
        match self {
            Turn::First => "first",
            Turn::ToolResult => "tool_result",
            Turn::FollowUp => "follow_up",
            Turn::None => "none",
        }
    }
}

/// What a request body tells.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequestFacts {
    /// Its top-level `model` ([`crate::request_model`]'s).
    pub model: Option<String>,
    pub turn: Turn,
    /// Responses' `previous_response_id`.
    pub previous_response_id: Option<String>,
    /// Responses' `conversation` (its id, given alone or as `{"id": …}`).
    pub conversation: Option<String>,
    /// The body of an API with conversations could not be read: its turn
    /// is [`Turn::None`].
    pub unreadable: bool,
}

/// What the messages (or items, or contents) said, as they are read.
#[derive(Debug, Default)]
struct Seen {
    /// The body has the API's conversation (its `messages`, `input` or
    /// `contents`, or a Responses id).
    conversational: bool,
    /// An earlier model turn, or an id that continues a conversation.
    earlier: bool,
    /// The last message (item, content) read is a tool's result.
    last_is_tool_result: bool,
}

/// Whether requests of `api` can be turns of a conversation: those whose
/// body [`read_request`] reads for one.
pub fn has_conversations(api: Api) -> bool {
    matches!(
        api,
        Api::OpenAi | Api::Ollama | Api::Anthropic | Api::Responses | Api::Gemini
    )
}

/// Reads `body`, a request of `api`; see the module documentation.
pub fn read_request(api: Api, body: &[u8]) -> RequestFacts {
    let mut facts = RequestFacts::default();
    let mut seen = Seen::default();
    let read = json::read(body, |r| {
        r.open_object()?;
        while let Some(key) = r.key()? {
            match (api, key) {
                (_, b"model") => {
                    facts.model = r
                        .string_or_null(|s| {
                            let s = std::str::from_utf8(s).ok()?;
                            Some(model::cut(s))
                        })?
                        .flatten();
                }
                (Api::OpenAi | Api::Ollama | Api::Anthropic, b"messages") => {
                    seen.conversational = true;
                    entries(r, &mut seen, message)?;
                }
                (Api::Responses, b"input") => {
                    seen.conversational = true;
                    entries(r, &mut seen, item)?;
                }
                (Api::Responses, b"previous_response_id") => {
                    seen.conversational = true;
                    facts.previous_response_id = id(r)?;
                    seen.earlier |= facts.previous_response_id.is_some();
                }
                (Api::Responses, b"conversation") => {
                    seen.conversational = true;
                    facts.conversation = conversation(r)?;
                    seen.earlier |= facts.conversation.is_some();
                }
                (Api::Gemini, b"contents") => {
                    seen.conversational = true;
                    entries(r, &mut seen, content)?;
                }
                _ => r.skip()?,
            }
        }
        Ok(())
    });
    if read.is_err() {
        facts.unreadable = has_conversations(api);
        facts.turn = Turn::None;
        return facts;
    }
    facts.turn = match seen {
        Seen {
            conversational: false,
            ..
        } => Turn::None,
        Seen {
            last_is_tool_result: true,
            ..
        } => Turn::ToolResult,
        Seen { earlier: true, .. } => Turn::FollowUp,
        _ => Turn::First,
    };
    facts
}

/// A string id of at most [`ID_MAX_BYTES`] bytes of UTF-8, else none.
fn id(r: &mut Reader<'_>) -> Result<Option<String>, Error> {
    if !matches!(r.peek()?, b'"' | b'n') {
        r.skip()?;
        return Ok(None);
    }
    let id = r.string_or_null(|s| {
        (!s.is_empty() && s.len() <= ID_MAX_BYTES)
            .then(|| std::str::from_utf8(s).ok().map(str::to_owned))
            .flatten()
    })?;
    Ok(id.flatten())
}

/// Responses' `conversation`: an id, or an object with its `id`.
fn conversation(r: &mut Reader<'_>) -> Result<Option<String>, Error> {
    if r.peek()? != b'{' {
        return id(r);
    }
    r.open_object()?;
    let mut found = None;
    while let Some(key) = r.key()? {
        match key {
            b"id" => found = id(r)?,
            _ => r.skip()?,
        }
    }
    Ok(found)
}

/// What one entry of a conversation (a message, an input item, a
/// content) says.
#[derive(Debug, Default)]
struct Said {
    /// The model wrote it.
    model: bool,
    /// It is a tool's result.
    tool_result: bool,
}

/// A conversation's list (`messages`, `input`, `contents`), each object of
/// it read by `entry`; a value that is no list (Responses' string `input`,
/// `null`) says nothing, and an entry that is no object neither.
fn entries(
    r: &mut Reader<'_>,
    seen: &mut Seen,
    entry: fn(&mut Reader<'_>) -> Result<Said, Error>,
) -> Result<(), Error> {
    if r.peek()? != b'[' {
        return r.skip();
    }
    r.open_list_or_null()?;
    while r.element()? {
        let said = if r.peek()? == b'{' {
            entry(r)?
        } else {
            r.skip()?;
            Said::default()
        };
        seen.earlier |= said.model;
        seen.last_is_tool_result = said.tool_result;
    }
    Ok(())
}

/// A message of chat completions, Ollama's chat or Anthropic Messages.
fn message(r: &mut Reader<'_>) -> Result<Said, Error> {
    r.open_object()?;
    let (mut role, mut tool_block) = (Role::Other, false);
    while let Some(key) = r.key()? {
        match key {
            b"role" => role = Role::read(r)?,
            b"content" => tool_block = any_object(r, b"type", |r| r.is_string(b"tool_result"))?,
            _ => r.skip()?,
        }
    }
    Ok(Said {
        model: role == Role::Model,
        tool_result: role == Role::Tool || (role == Role::User && tool_block),
    })
}

/// An item of a Responses request's `input`.
fn item(r: &mut Reader<'_>) -> Result<Said, Error> {
    r.open_object()?;
    let (mut role, mut kind) = (Role::Other, Kind::Other);
    while let Some(key) = r.key()? {
        match key {
            b"role" => role = Role::read(r)?,
            b"type" => kind = Kind::read(r)?,
            _ => r.skip()?,
        }
    }
    Ok(Said {
        model: kind == Kind::Output || role == Role::Model,
        tool_result: kind == Kind::ToolOutput,
    })
}

/// A content of a Gemini request.
fn content(r: &mut Reader<'_>) -> Result<Said, Error> {
    r.open_object()?;
    let (mut role, mut response) = (Role::Other, false);
    while let Some(key) = r.key()? {
        match key {
            b"role" => role = Role::read(r)?,
            b"parts" => response = any_object(r, b"functionResponse", |r| r.skip().map(|()| true))?,
            _ => r.skip()?,
        }
    }
    Ok(Said {
        model: role == Role::Model,
        tool_result: response,
    })
}

/// Whether the value, when it is a list, has an object whose member
/// `wanted` `value` (which reads it whole) says so of: a `tool_result`
/// block of a message's content, a `functionResponse` part.
fn any_object(
    r: &mut Reader<'_>,
    wanted: &[u8],
    value: fn(&mut Reader<'_>) -> Result<bool, Error>,
) -> Result<bool, Error> {
    if r.peek()? != b'[' {
        return r.skip().map(|()| false);
    }
    r.open_list_or_null()?;
    let mut found = false;
    while r.element()? {
        if r.peek()? != b'{' {
            r.skip()?;
            continue;
        }
        r.open_object()?;
        while let Some(key) = r.key()? {
            if key == wanted {
                found |= value(r)?;
            } else {
                r.skip()?;
            }
        }
    }
    Ok(found)
}

/// Who wrote a message, as far as the turn goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Role {
    /// The model: `assistant`, Gemini's `model`.
    Model,
    /// A tool's result: `tool`, the legacy `function`.
    Tool,
    User,
    Other,
}

impl Role {
    fn read(r: &mut Reader<'_>) -> Result<Self, Error> {
        if r.peek()? != b'"' {
            return r.skip().map(|()| Role::Other);
        }
        let role = r.string_or_null(|s| match s {
            b"assistant" | b"model" => Role::Model,
            b"tool" | b"function" => Role::Tool,
            b"user" => Role::User,
            _ => Role::Other,
        })?;
        Ok(role.unwrap_or(Role::Other))
    }
}

/// What a Responses input item is, as far as the turn goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    /// What a model wrote: a call of a function or tool, reasoning.
    Output,
    /// A tool's result: `function_call_output`, `*_call_output`.
    ToolOutput,
    Other,
}

impl Kind {
    fn read(r: &mut Reader<'_>) -> Result<Self, Error> {
        if r.peek()? != b'"' {
            return r.skip().map(|()| Kind::Other);
        }
        let kind = r.string_or_null(|s| {
            if s.ends_with(b"_call_output") {
                Kind::ToolOutput
            } else if s.ends_with(b"_call") || s == b"reasoning" || s == b"mcp_list_tools" {
                Kind::Output
            } else {
                Kind::Other
            }
        })?;
        Ok(kind.unwrap_or(Kind::Other))
    }
}

#[cfg(test)]
#[path = "turn/tests.rs"]
mod tests;
