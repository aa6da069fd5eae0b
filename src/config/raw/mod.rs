//! Stage one of loading: the YAML document read into serde types that mirror
//! it, plus every key the types do not know.
//!
//! In the types here (`schema.rs`), `slo_files` is kept as the text
//! written in the file, with its location ([`Spanned`]), for stage two
//! ([`super::load`]) to resolve; an SLO file's classes are read into
//! `slo::SloClass` (`super::slo_class`). Every other field of the main file
//! is typed,
//! as are the sections read as their runtime types (`proxy`,
//! `trace_context`...), and read by `super::located` without failing: a
//! bad value is recorded with its location and the key is found from it.
//! That way one bad value does not stop reading, and every problem is
//! reported at once.
//! The only errors this stage stops at are YAML syntax errors and values of
//! the wrong shape (a list where a mapping belongs), which serde cannot get
//! past.
//!
//! Unknown keys are not rejected with `deny_unknown_fields`, which stops at the
//! first one: the deserializer is wrapped in `serde_ignored`, which reports the
//! path of every key no type claimed, and each path is then located by a
//! second, structure-only pass over the document ([`Node`]).
//!
//! This module (`schema.rs`, the types; `read.rs`, the reading) and
//! `super::located` (positions and typed values) are the only ones that
//! know the YAML crate. It must not apply defaults, or be visible outside
//! `config`.
//!
//! The keys the reader accepts where an unknown one stands are its
//! caller's to say (`read`'s `known`: the declarations of
//! `super::keys`, which name the types of their mappings), so the reader
//! knows no section by name.

mod read;
mod schema;

#[cfg(test)]
pub(super) use read::keys_of;
pub(super) use read::{
    Document, Locator, Segment, UnknownKey, dotted, fields_of, read, read_slo, segments,
};
pub(super) use schema::*;

#[cfg(test)]
#[allow(clippy::expect_used, clippy::unwrap_used)] // Tests panic on purpose.
mod tests {
    use super::super::keys::known;
    use super::*;

    fn known_keys(parent: &[Segment]) -> &'static [&'static str] {
        known(&keys_of(parent))
    }

    fn unknown(text: &str) -> Vec<(String, Option<(u64, u64)>)> {
        let doc = read(text, known).expect("reads");
        doc.unknown
            .iter()
            .map(|key| (dotted(&key.path), key.pos.map(|pos| (pos.line, pos.column))))
            .collect()
    }

    #[test]
    fn known_keys_are_not_reported() {
        let text = "listen: 0.0.0.0:1\nadmin: {listen: 127.0.0.1:2}\nproxy:\n  x_forwarded: true\n\
                    metrics:\n  models: {allow: [a, b], max_distinct: 3}\n  buckets: {input_tokens: [1, 2]}\n\
                    routes:\n  - name: a\n    match: {path_prefix: /, methods: [GET]}\n    upstream: http://h\n    timeouts: {idle: 5s}\n";
        assert_eq!(unknown(text), vec![]);
    }

    #[test]
    fn unknown_keys_are_all_found_and_located() {
        let text = "listen: 0.0.0.0:1\nlisen: x\nroutes:\n  - name: a\n    timeouts:\n      idel: 5s\n  - name: b\n    match:\n      prefix: /x\n      host: h\n    extra: {deep: [1, 2]}\n";
        assert_eq!(
            unknown(text),
            vec![
                ("lisen".to_owned(), Some((2, 1))),
                ("routes[0].timeouts.idel".to_owned(), Some((6, 7))),
                ("routes[1].match.prefix".to_owned(), Some((9, 7))),
                ("routes[1].extra".to_owned(), Some((11, 5))),
            ]
        );
    }

    #[test]
    fn unknown_keys_in_flow_style_and_numbers_as_keys() {
        let text = "admin: {listen: 127.0.0.1:1, port: 2}\n1: x\n";
        assert_eq!(
            unknown(text),
            vec![
                ("admin.port".to_owned(), Some((1, 30))),
                ("1".to_owned(), Some((2, 1))),
            ]
        );
    }

    #[test]
    fn unknown_key_with_a_complex_key_inside_is_still_reported() {
        let doc = read("extra: {[a, b]: 1}\n", known).expect("reads");
        assert_eq!(doc.unknown.len(), 1);
        assert_eq!(dotted(&doc.unknown[0].path), "extra");
    }

    #[test]
    fn expected_keys_come_from_the_types() {
        assert_eq!(
            known_keys(&[
                Segment::Key("routes".into()),
                Segment::Index(3),
                Segment::Key("timeouts".into())
            ]),
            &[
                "connect",
                "response_headers",
                "idle",
                "request_body",
                "request_body_total"
            ]
        );
        assert!(known_keys(&[]).contains(&"routes"));
        assert!(known_keys(&[Segment::Key("routes".into()), Segment::Index(0)]).contains(&"match"));
    }

    #[test]
    fn wrong_shape_names_the_key() {
        let error = read(
            "listen: 0.0.0.0:1\nroutes:\n  - name: a\n    match: [1]\n",
            known,
        )
        .expect_err("fails");
        assert_eq!(error.pos.map(|p| p.line), Some(4));
        assert_eq!(error.key, "routes[0].match");
        assert!(!error.message.contains('\n'), "{}", error.message);
    }

    #[test]
    fn syntax_error_has_a_line() {
        let error = read("listen: 0.0.0.0:1\nroutes: [\n", known).expect_err("fails");
        assert!(error.pos.is_some());
        assert_eq!(error.key, "");
    }

    #[test]
    fn values_are_located_by_their_key_path() {
        let text = "scrape: {timeout: 3s}\nroutes:\n  - name: a\n  - name: b\n    tls:\n      ca_file: x\n    gpu_select: {gpu: ['0']}\n";
        let locator = Locator::new(text);
        let at = |key: &str| locator.value(key).map(|p| (p.line, p.column));
        assert_eq!(at("scrape.timeout"), Some((1, 19)));
        assert_eq!(at("routes[1].tls"), Some((6, 7)));
        assert_eq!(at("routes[1].gpu_select"), Some((7, 17)));
        assert_eq!(at("routes[1].gpu_select.gpu[0]"), Some((7, 24)));
        assert_eq!(at("routes[2]"), None);
        assert_eq!(at("scrape.interval"), None);
        assert_eq!(at("routes[x]"), None);
    }

    #[test]
    fn dotted_paths() {
        let path = [
            Segment::Key("routes".into()),
            Segment::Index(1),
            Segment::Key("timeouts".into()),
            Segment::Key("idle".into()),
        ];
        assert_eq!(dotted(&path), "routes[1].timeouts.idle");
    }
}
