//! What a protocol module keeps of a stream's last event so as not to read
//! the next one when it is the same bytes but for its one string of output
//! and the values it skipped ([`Repeat`]), and how it finds that string
//! while reading ([`Strings`]).

use super::event::EventInfo;
use super::json::{Error, Output, Reader, Skipped, Template};

/// A stream's last event whose output was one string, as a [`Template`],
/// with what the event gave but for that string: an event that is the same
/// bytes with another string in its place, and other strings or numbers in
/// the places of those the read skipped, gives the same but for the
/// output, which that string decides alone. Boxed when first kept: a
/// stream of another API, or one whose events are never kept, holds a
/// pointer's worth.
#[derive(Debug, Default)]
pub(crate) struct Repeat(Option<Box<Kept>>);

#[derive(Debug, Default)]
struct Kept {
    template: Template,
    /// What the event gave without its string's output.
    info: EventInfo,
    /// The output the string is: visible (text, refusal, a tool call's
    /// input) or reasoning.
    visible: bool,
    /// Events read since the template last matched. Past a few, the
    /// template is remade only every [`REMAKE_EVERY`] of them: a stream
    /// whose events all differ outside their string (logprobs that change
    /// with each token) would otherwise pay for a copy of each.
    misses: u32,
}

/// How often a template that keeps missing is remade.
const REMAKE_EVERY: u32 = 32;

impl Repeat {
    /// What `data` gives, when it is the template with another string.
    #[inline]
    pub(crate) fn info(&mut self, data: &[u8]) -> Option<EventInfo> {
        let kept = self.0.as_deref_mut()?;
        let nonempty = kept.template.matches(data)?;
        kept.misses = 0;
        let out = Output {
            token: kept.info.token,
            visible: kept.info.visible,
        }
        .or(string_output(kept.visible, nonempty));
        Some(EventInfo {
            token: out.token,
            visible: out.visible,
            ..kept.info
        })
    }

    /// Makes `data` the template when `strings` found exactly one string
    /// of output in it, with the values the read `skipped` and `info`, what
    /// it gave without that string's output (the caller's reading depended
    /// on the string only through it). Otherwise the last template is kept:
    /// any template gives what reading would.
    pub(crate) fn keep(
        &mut self,
        data: &[u8],
        strings: &Strings,
        skipped: &Skipped,
        info: EventInfo,
    ) {
        if let (1, Some((span, visible))) = (strings.count, strings.last) {
            let kept = self.0.get_or_insert_with(Box::default);
            kept.misses = kept.misses.saturating_add(1);
            if !(kept.template.is_empty()
                || kept.misses <= 2
                || kept.misses.is_multiple_of(REMAKE_EVERY))
            {
                return;
            }
            kept.template.set(data, span, skipped);
            kept.info = info;
            kept.visible = visible;
        }
    }

    /// Whether there is none.
    #[cfg(test)]
    pub(crate) fn is_empty(&self) -> bool {
        self.0.as_ref().is_none_or(|k| k.template.is_empty())
    }

    /// Whether the last event matched the template.
    #[cfg(test)]
    pub(crate) fn matched(&self) -> bool {
        self.0
            .as_ref()
            .is_some_and(|k| k.misses == 0 && !k.template.is_empty())
    }
}

/// The output a string of output is when `nonempty`.
fn string_output(visible: bool, nonempty: bool) -> Output {
    if visible {
        Output::visible(nonempty)
    } else {
        Output::reasoning(nonempty)
    }
}

/// The strings of output of one event, as it is read: the output of all
/// of them, and where the one was when there was exactly one.
#[derive(Debug, Default)]
pub(crate) struct Strings {
    /// Their output together.
    pub(crate) out: Output,
    count: u32,
    /// The last one's span and whether it is visible output.
    last: Option<((usize, usize), bool)>,
}

impl Strings {
    /// Reads the value of a member that is output (visible or not): a
    /// string is counted here, its output in [`out`](Self::out); the
    /// output of anything else is returned.
    #[inline]
    pub(crate) fn read(&mut self, r: &mut Reader<'_>, visible: bool) -> Result<Output, Error> {
        let (nonempty, span) = r.nonempty_span()?;
        let more = string_output(visible, nonempty);
        let Some(span) = span else {
            return Ok(more);
        };
        self.out = self.out.or(more);
        self.count += 1;
        self.last = Some((span, visible));
        Ok(Output::NONE)
    }
}
