//! The rules of the metrics' owners: no struct on the export path holds
//! more than 12 fields (an owner that grows past that holds two concerns),
//! and requests in flight are counted by one type in the whole workspace.

use std::path::Path;

use syn::visit::Visit;

use super::rust_files;

const MAX_FIELDS: usize = 12;

/// The structs of a file, with their number of fields, test code left out.
#[derive(Default)]
struct Structs(Vec<(String, usize)>);

impl<'ast> Visit<'ast> for Structs {
    fn visit_item_struct(&mut self, s: &'ast syn::ItemStruct) {
        self.0.push((s.ident.to_string(), s.fields.len()));
    }

    fn visit_item_mod(&mut self, m: &'ast syn::ItemMod) {
        if !super::is_test(&m.attrs) {
            syn::visit::visit_item_mod(self, m);
        }
    }
}

fn structs(dirs: &[&str]) -> Vec<(String, String, usize)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for dir in dirs {
        let path = root.join(dir);
        if path.is_dir() {
            rust_files(&path, &mut files);
        } else {
            files.push(path);
        }
    }
    let mut out = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(&file).unwrap();
        let parsed = syn::parse_file(&text).unwrap();
        let mut found = Structs::default();
        found.visit_file(&parsed);
        for (name, fields) in found.0 {
            out.push((file.display().to_string(), name, fields));
        }
    }
    out
}

/// The owners of the exported families, the exposition and what the admin
/// listener reads hold one concern each.
#[test]
fn no_struct_on_the_export_path_has_more_than_12_fields() {
    let wide: Vec<String> = structs(&["src/observe/metrics", "src/admin", "src/in_force.rs"])
        .into_iter()
        .filter(|(_, _, fields)| *fields > MAX_FIELDS)
        .map(|(file, name, fields)| format!("{file}: {name} has {fields} fields"))
        .collect();
    assert!(wide.is_empty(), "{}", wide.join("\n"));
}

/// A request in flight is counted by `slo::in_flight::InFlight`, kept by
/// label set in `slo::found::Found`: no other type of the workspace counts
/// requests in flight under that name.
#[test]
fn requests_in_flight_are_counted_by_one_type() {
    let counts: Vec<String> = structs(&["src", "crates"])
        .into_iter()
        .filter(|(_, name, _)| name.contains("InFlight"))
        .map(|(file, name, _)| format!("{file}: {name}"))
        .collect();
    assert_eq!(counts.len(), 1, "{}", counts.join("\n"));
    assert!(
        counts[0].ends_with("crates/slo/src/in_flight.rs: InFlight"),
        "{}",
        counts[0]
    );
}

/// The recorder of one request reaches what it observes into (its
/// handles, its live series, the live windows, the requests in flight),
/// never the whole metrics or a registry it does not own.
#[test]
fn a_request_s_observer_holds_no_registry() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let text = std::fs::read_to_string(root.join("src/observe/recorder.rs")).unwrap();
    let file = syn::parse_file(&text).unwrap();
    let observer = file
        .items
        .iter()
        .find_map(|item| match item {
            syn::Item::Struct(s) if s.ident == "RequestObserver" => Some(s),
            _ => None,
        })
        .expect("RequestObserver in src/observe/recorder.rs");
    let mut held = Vec::new();
    for field in &observer.fields {
        let mut names = Names::default();
        names.visit_type(&field.ty);
        if names.0.iter().any(|n| n == "Metrics" || n == "Registry") {
            held.push(format!("{}: {:?}", field.ident.as_ref().unwrap(), names.0));
        }
    }
    assert!(held.is_empty(), "{}", held.join("\n"));
}

/// The names of the paths in a type.
#[derive(Default)]
struct Names(Vec<String>);

impl<'ast> Visit<'ast> for Names {
    fn visit_path_segment(&mut self, segment: &'ast syn::PathSegment) {
        self.0.push(segment.ident.to_string());
        syn::visit::visit_path_segment(self, segment);
    }
}
