//! The shape of the source, checked: no module circles in any crate of the
//! workspace, the root crate's modules in the layers its `src/lib.rs`
//! states, no Rust file of the repository past 800 lines (every line
//! counted: a module's tests, and the files of the tests, benches and fuzz
//! targets, are read like the rest), one integration test binary per
//! package at most, and no hand-built JSON in the config module (`/config`
//! is serialized from the runtime types).
//!
//! A module circle is two parts of one parent that use each other. The
//! parts of a module are its own file's items and each child module's
//! whole subtree; a reference from one part to an item that lives in
//! another (after following `use` re-exports to where the item is defined)
//! is an edge between them, and a cycle among the parts of any module is a
//! circle. A child using its parent's own items while the parent's own code
//! uses the child is one too. Test code (`#[cfg(test)]`) is left out: a
//! test module uses what it tests.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::{Path, PathBuf};

use syn::visit::Visit;

mod in_force;
mod owners;

const MAX_LINES: usize = 800;

/// A module: its path from the crate root (the crate's name first).
type ModPath = Vec<String>;

#[derive(Default)]
struct Module {
    file: PathBuf,
    children: BTreeSet<String>,
    /// `use` declarations: the name they bring in and the path it names.
    imports: HashMap<String, Vec<String>>,
    /// Paths written in the module's own code, `use` paths included.
    refs: Vec<Vec<String>>,
}

#[derive(Default)]
struct Crates {
    modules: BTreeMap<ModPath, Module>,
}

fn is_test(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|a| {
        a.path().is_ident("cfg")
            && a.meta
                .require_list()
                .is_ok_and(|l| l.tokens.to_string() == "test")
    })
}

fn idents(path: &syn::Path) -> Vec<String> {
    path.segments.iter().map(|s| s.ident.to_string()).collect()
}

/// Collects every path a piece of code names, macro arguments included
/// where they parse as expressions.
#[derive(Default)]
struct Paths(Vec<Vec<String>>);

impl<'ast> Visit<'ast> for Paths {
    fn visit_path(&mut self, path: &'ast syn::Path) {
        if path.leading_colon.is_none() {
            self.0.push(idents(path));
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.visit_path(&mac.path);
        let parser = syn::punctuated::Punctuated::<syn::Expr, syn::Token![,]>::parse_terminated;
        if let Ok(args) = mac.parse_body_with(parser) {
            for arg in &args {
                self.visit_expr(arg);
            }
        }
    }

    // `pub(crate)` and `pub(super)` name no item.
    fn visit_visibility(&mut self, _: &'ast syn::Visibility) {}

    fn visit_impl_item_fn(&mut self, f: &'ast syn::ImplItemFn) {
        if !is_test(&f.attrs) {
            syn::visit::visit_impl_item_fn(self, f);
        }
    }
}

fn flatten_use(
    tree: &syn::UseTree,
    prefix: &mut Vec<String>,
    out: &mut Vec<(String, Vec<String>)>,
) {
    match tree {
        syn::UseTree::Path(p) => {
            prefix.push(p.ident.to_string());
            flatten_use(&p.tree, prefix, out);
            prefix.pop();
        }
        syn::UseTree::Name(n) => {
            let name = n.ident.to_string();
            let mut path = prefix.clone();
            if name != "self" {
                path.push(name.clone());
            }
            let name = if name == "self" {
                prefix.last().cloned().unwrap_or_default()
            } else {
                name
            };
            out.push((name, path));
        }
        syn::UseTree::Rename(r) => {
            let mut path = prefix.clone();
            if r.ident != "self" {
                path.push(r.ident.to_string());
            }
            out.push((r.rename.to_string(), path));
        }
        syn::UseTree::Glob(_) => out.push((String::from("*"), prefix.clone())),
        syn::UseTree::Group(g) => {
            for t in &g.items {
                flatten_use(t, prefix, out);
            }
        }
    }
}

impl Crates {
    fn load_crate(&mut self, name: &str, root: &Path) {
        let text = std::fs::read_to_string(root).unwrap();
        let file = syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", root.display()));
        let dir = root.parent().unwrap().to_path_buf();
        self.load_items(vec![name.to_owned()], root, &dir, &file.items);
    }

    /// `dir` is where the files of this module's children are.
    fn load_items(&mut self, path: ModPath, file: &Path, dir: &Path, items: &[syn::Item]) {
        let mut module = Module {
            file: file.to_path_buf(),
            ..Module::default()
        };
        let mut children = Vec::new();
        for item in items {
            match item {
                syn::Item::Mod(m) if is_test(&m.attrs) => {}
                syn::Item::Mod(m) => {
                    let name = m.ident.to_string();
                    module.children.insert(name.clone());
                    children.push((name, m));
                }
                syn::Item::Use(u) if !is_test(&u.attrs) => {
                    let mut flat = Vec::new();
                    flatten_use(&u.tree, &mut Vec::new(), &mut flat);
                    // A private import is there for the module's own
                    // code; a public one passes a name on, which is no use
                    // of it.
                    let private = matches!(u.vis, syn::Visibility::Inherited);
                    for (name, target) in flat {
                        if private {
                            module.refs.push(target.clone());
                        }
                        if name != "*" {
                            module.imports.insert(name, target);
                        }
                    }
                }
                item => {
                    let attrs = match item {
                        syn::Item::Fn(i) => &i.attrs,
                        syn::Item::Impl(i) => &i.attrs,
                        syn::Item::Struct(i) => &i.attrs,
                        syn::Item::Enum(i) => &i.attrs,
                        syn::Item::Const(i) => &i.attrs,
                        syn::Item::Static(i) => &i.attrs,
                        syn::Item::Trait(i) => &i.attrs,
                        syn::Item::Type(i) => &i.attrs,
                        syn::Item::Macro(i) => &i.attrs,
                        _ => &Vec::new(),
                    };
                    if !is_test(attrs) {
                        let mut paths = Paths::default();
                        paths.visit_item(item);
                        module.refs.extend(paths.0);
                    }
                }
            }
        }
        self.modules.insert(path.clone(), module);
        for (name, m) in children {
            let mut child = path.clone();
            child.push(name.clone());
            let child_dir = dir.join(&name);
            if let Some((_, items)) = &m.content {
                self.load_items(child, file, &child_dir, items);
                continue;
            }
            let candidates = [
                dir.join(format!("{name}.rs")),
                dir.join(&name).join("mod.rs"),
            ];
            let found = candidates.iter().find(|p| p.exists());
            let found = found.unwrap_or_else(|| panic!("no file for module {}", child.join("::")));
            let text = std::fs::read_to_string(found).unwrap();
            let parsed =
                syn::parse_file(&text).unwrap_or_else(|e| panic!("{}: {e}", found.display()));
            self.load_items(child, found, &child_dir, &parsed.items);
        }
    }

    /// The module in which the item a path names is defined (after
    /// re-exports), or `None` for what lies outside the crate.
    fn resolve(&self, from: &[String], segs: &[String], depth: usize) -> Option<ModPath> {
        if depth > 16 || segs.is_empty() {
            return None;
        }
        let module = self.modules.get(from)?;
        let first = segs[0].as_str();
        let (mut cur, rest): (ModPath, &[String]) = match first {
            "crate" => (vec![from[0].clone()], &segs[1..]),
            "self" => (from.to_vec(), &segs[1..]),
            "super" => {
                let mut cur = from[..from.len() - 1].to_vec();
                let mut rest = &segs[1..];
                while rest.first().is_some_and(|s| s == "super") {
                    cur.pop();
                    rest = &rest[1..];
                }
                (cur, rest)
            }
            "Self" => return None,
            name if module.children.contains(name) => {
                let mut cur = from.to_vec();
                cur.push(name.to_owned());
                (cur, &segs[1..])
            }
            name => {
                let target = module.imports.get(name)?;
                let mut full = target.clone();
                full.extend_from_slice(&segs[1..]);
                // An import is resolved where it is written; one that
                // names itself (`use serde;`) is an outside crate.
                return if full == segs {
                    None
                } else {
                    self.resolve(from, &full, depth + 1)
                };
            }
        };
        for (i, seg) in rest.iter().enumerate() {
            let m = self.modules.get(&cur)?;
            if m.children.contains(seg) {
                cur.push(seg.clone());
            } else if let Some(target) = m.imports.get(seg) {
                let mut full = target.clone();
                full.extend_from_slice(&rest[i + 1..]);
                let at = cur.clone();
                return self.resolve(&at, &full, depth + 1);
            } else {
                return Some(cur);
            }
        }
        Some(cur)
    }

    /// Every use of one module by another, with one path that makes it.
    fn edges(&self) -> BTreeMap<(ModPath, ModPath), String> {
        let mut edges = BTreeMap::new();
        for (path, module) in &self.modules {
            for r in &module.refs {
                if let Some(target) = self.resolve(path, r, 0)
                    && &target != path
                {
                    let why = format!("{} names {}", module.file.display(), r.join("::"));
                    edges.entry((path.clone(), target)).or_insert(why);
                }
            }
        }
        edges
    }

    /// Every circle, as the module whose parts they are and the parts.
    fn circles(&self) -> Vec<String> {
        let edges = self.edges();
        let mut found = Vec::new();
        for parent in self.modules.keys() {
            let part = |m: &ModPath| -> Option<String> {
                if !m.starts_with(parent) {
                    None
                } else if m.len() == parent.len() {
                    Some(String::from("(own items)"))
                } else {
                    Some(m[parent.len()].clone())
                }
            };
            let mut graph: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
            for ((from, to), why) in &edges {
                if let (Some(a), Some(b)) = (part(from), part(to))
                    && a != b
                {
                    graph
                        .entry(a)
                        .or_default()
                        .entry(b)
                        .or_insert_with(|| why.clone());
                }
            }
            for cycle in cycles(&graph) {
                let mut text = format!("in {}: {}", parent.join("::"), cycle.join(" -> "));
                for pair in cycle.windows(2) {
                    text.push_str(&format!("\n    {}", graph[&pair[0]][&pair[1]]));
                }
                found.push(text);
            }
        }
        found
    }
}

/// One cycle through each strongly connected set of more than one part.
fn cycles(graph: &BTreeMap<String, BTreeMap<String, String>>) -> Vec<Vec<String>> {
    let reach = |from: &String| -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let mut stack = vec![from.clone()];
        while let Some(n) = stack.pop() {
            for next in graph.get(&n).into_iter().flat_map(|m| m.keys()) {
                if seen.insert(next.clone()) {
                    stack.push(next.clone());
                }
            }
        }
        seen
    };
    let mut done = BTreeSet::new();
    let mut out = Vec::new();
    for start in graph.keys() {
        if done.contains(start) || !reach(start).contains(start) {
            continue;
        }
        // A shortest way back to `start`, by breadth-first search.
        let mut back: BTreeMap<String, String> = BTreeMap::new();
        let mut queue = std::collections::VecDeque::from([start.clone()]);
        'search: while let Some(n) = queue.pop_front() {
            for next in graph.get(&n).into_iter().flat_map(|m| m.keys()) {
                if next == start {
                    back.insert(start.clone(), n.clone());
                    break 'search;
                }
                if !back.contains_key(next) {
                    back.insert(next.clone(), n.clone());
                    queue.push_back(next.clone());
                }
            }
        }
        let mut cycle = vec![start.clone()];
        let mut at = back[start].clone();
        while &at != start {
            cycle.push(at.clone());
            at = back[&at].clone();
        }
        cycle.push(start.clone());
        cycle.reverse();
        done.extend(cycle.iter().cloned());
        out.push(cycle);
    }
    out
}

fn workspace() -> Crates {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut crates = Crates::default();
    crates.load_crate("tokenmeter", &root.join("src/lib.rs"));
    crates.load_crate("tokenmeter_main", &root.join("src/main.rs"));
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        let dir = entry.unwrap().path();
        let name = dir.file_name().unwrap().to_string_lossy().into_owned();
        for (file, suffix) in [("lib.rs", ""), ("main.rs", "_main")] {
            let path = dir.join("src").join(file);
            if path.exists() {
                crates.load_crate(&format!("{name}{suffix}"), &path);
            }
        }
    }
    crates
}

#[test]
fn no_module_of_any_crate_is_in_a_circle() {
    let crates = workspace();
    assert!(
        crates.modules.len() > 100,
        "found only {} modules",
        crates.modules.len()
    );
    let circles = crates.circles();
    assert!(
        circles.is_empty(),
        "{} module circles:\n{}",
        circles.len(),
        circles.join("\n")
    );
}

#[test]
fn the_circle_check_finds_a_circle() {
    // Two modules that use each other, and a child that uses its parent's
    // own items while the parent uses the child.
    let source = "
        mod a { pub fn f() { crate::b::g(); } }
        mod b { pub fn g() {} pub fn h() { super::a::f(); } }
        mod c { mod d { pub fn i() { super::j(); } } pub fn j() {} pub fn k() { d::i(); } }
        mod e { pub use self::inner::l; mod inner { pub fn l() {} } }
        mod m { pub fn n() { crate::e::l(); } }
    ";
    let file = syn::parse_file(source).unwrap();
    let mut crates = Crates::default();
    crates.load_items(
        vec![String::from("x")],
        Path::new("x.rs"),
        Path::new("."),
        &file.items,
    );
    let circles = crates.circles();
    assert_eq!(circles.len(), 2, "{circles:#?}");
    assert!(circles[0].starts_with("in x: a -> b -> a"), "{circles:#?}");
    assert!(
        circles[1].starts_with("in x::c: (own items) -> d -> (own items)"),
        "{circles:#?}"
    );
}

/// The root crate's modules, in the order its module doc lists them
/// (`//! - [`name`]: ...`): the top layer first.
fn stated_layers(lib_rs: &str) -> Vec<String> {
    lib_rs
        .lines()
        .filter_map(|l| l.trim_start().strip_prefix("//! - [`"))
        .filter_map(|l| l.split_once("`]"))
        .map(|(name, _)| name.to_owned())
        .collect()
}

/// Every use, in `krate`, of a module by one listed above it in `layers`
/// (or not listed at all), with the path that makes it.
fn layer_violations(crates: &Crates, krate: &str, layers: &[String]) -> Vec<String> {
    let rank = |m: &ModPath| -> Option<usize> {
        if m.first().is_some_and(|c| c == krate) {
            let top = m.get(1)?;
            Some(layers.iter().position(|l| l == top).unwrap_or(usize::MAX))
        } else {
            None
        }
    };
    crates
        .edges()
        .into_iter()
        .filter_map(|((from, to), why)| {
            let (a, b) = (rank(&from)?, rank(&to)?);
            (a > b).then(|| {
                format!(
                    "{} uses {}, which is not below it\n    {why}",
                    from.join("::"),
                    to.join("::")
                )
            })
        })
        .collect()
}

#[test]
fn each_module_of_the_root_crate_uses_only_those_listed_below_it() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let lib_rs = std::fs::read_to_string(root.join("src/lib.rs")).unwrap();
    let layers = stated_layers(&lib_rs);
    let declared: BTreeSet<String> = syn::parse_file(&lib_rs)
        .unwrap()
        .items
        .iter()
        .filter_map(|i| match i {
            syn::Item::Mod(m) => Some(m.ident.to_string()),
            _ => None,
        })
        .collect();
    assert_eq!(
        layers.iter().cloned().collect::<BTreeSet<_>>(),
        declared,
        "src/lib.rs's module doc lists each of its modules once: {layers:?}"
    );
    assert_eq!(layers.len(), declared.len(), "listed twice: {layers:?}");
    let found = layer_violations(&workspace(), "tokenmeter", &layers);
    assert!(
        found.is_empty(),
        "{} uses against the layers of src/lib.rs ({}):\n{}",
        found.len(),
        layers.join(", "),
        found.join("\n")
    );
}

#[test]
fn the_layer_check_finds_a_use_upwards() {
    let lib_rs = "
        //! - [`top`]: uses what is below.
        //! - [`bottom`]: uses nothing listed.
        mod top { pub fn f() { crate::bottom::g(); } }
        mod bottom { pub fn g() {} pub fn h() { crate::top::f(); } }
    ";
    let layers = stated_layers(lib_rs);
    assert_eq!(layers, ["top", "bottom"]);
    let file = syn::parse_file(lib_rs).unwrap();
    let mut crates = Crates::default();
    crates.load_items(
        vec![String::from("x")],
        Path::new("x.rs"),
        Path::new("."),
        &file.items,
    );
    let found = layer_violations(&crates, "x", &layers);
    assert_eq!(found.len(), 1, "{found:#?}");
    assert!(
        found[0].starts_with("x::bottom uses x::top, which is not below it"),
        "{found:#?}"
    );
}

/// Every `.rs` file under `dir`, less hidden folders (`.git`, `.cargo`) and
/// build output, whose generated sources are not the repository's: a
/// folder named `target`, or one Cargo tagged as a target directory with a
/// `CACHEDIR.TAG` (`CARGO_TARGET_DIR` may give it another name).
fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap_or_default().to_string_lossy();
        if path.is_dir() {
            let built = name == "target" || path.join("CACHEDIR.TAG").exists();
            if !built && !name.starts_with('.') {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// One size for every Rust file, read whole: a module with its tests
/// beside it, a test file, a bench, a fuzz target. A limit that leaves a
/// module's tests out lets its file grow past what one reader takes in.
#[test]
fn no_rust_file_is_longer_than_800_lines() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    rust_files(root, &mut files);
    assert!(files.len() > 200, "found only {} files", files.len());
    for part in [
        "src",
        "tests",
        "benches",
        "fuzz/fuzz_targets",
        "crates/slo/src",
    ] {
        let found = files.iter().any(|f| f.starts_with(root.join(part)));
        assert!(found, "no Rust file found under {part}");
    }
    let mut long: Vec<String> = files
        .iter()
        .filter_map(|f| {
            let n = std::fs::read_to_string(f).unwrap().lines().count();
            let name = f.strip_prefix(root).unwrap_or(f).display();
            (n > MAX_LINES).then(|| format!("{name}: {n} lines"))
        })
        .collect();
    long.sort();
    assert!(long.is_empty(), "{}", long.join("\n"));
}

/// The integration test binaries of a package: what Cargo finds by itself
/// in its `tests/` (each `tests/*.rs` and each `tests/*/main.rs`) and the
/// `[[test]]` targets its manifest names.
fn test_binaries(package: &Path) -> Vec<String> {
    let mut found = Vec::new();
    if let Ok(entries) = std::fs::read_dir(package.join("tests")) {
        for entry in entries {
            let path = entry.unwrap().path();
            let binary = if path.is_dir() {
                path.join("main.rs")
            } else {
                path.clone()
            };
            if binary.is_file() && binary.extension().is_some_and(|e| e == "rs") {
                found.push(binary.display().to_string());
            }
        }
    }
    let manifest = std::fs::read_to_string(package.join("Cargo.toml")).unwrap();
    let declared = manifest.lines().filter(|l| l.trim() == "[[test]]").count();
    found.extend((0..declared).map(|_| format!("{}: [[test]]", package.display())));
    found.sort();
    found
}

#[test]
fn each_package_has_one_integration_test_binary_at_most() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut packages = vec![root.to_path_buf()];
    for entry in std::fs::read_dir(root.join("crates")).unwrap() {
        packages.push(entry.unwrap().path());
    }
    assert!(packages.len() > 5, "found only {packages:?}");
    let many: Vec<String> = packages
        .iter()
        .map(|p| test_binaries(p))
        .filter(|b| b.len() > 1)
        .map(|b| b.join(", "))
        .collect();
    assert!(
        many.is_empty(),
        "more than one test binary:\n{}",
        many.join("\n")
    );
}

/// Finds `json!` invocations outside test modules.
#[derive(Default)]
struct JsonMacros(usize);

impl<'ast> Visit<'ast> for JsonMacros {
    fn visit_item_mod(&mut self, item: &'ast syn::ItemMod) {
        if !is_test(&item.attrs) {
            syn::visit::visit_item_mod(self, item);
        }
    }
    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        if mac.path.segments.last().is_some_and(|s| s.ident == "json") {
            self.0 += 1;
        }
        syn::visit::visit_macro(self, mac);
    }
}

#[test]
fn the_config_module_builds_no_json_by_hand() {
    let crates = workspace();
    let files: BTreeSet<&PathBuf> = crates
        .modules
        .iter()
        .filter(|(path, _)| path.len() >= 2 && path[0] == "tokenmeter" && path[1] == "config")
        .map(|(_, m)| &m.file)
        .collect();
    assert!(files.len() > 10, "found only {} files", files.len());
    let built: Vec<String> = files
        .into_iter()
        .filter_map(|f| {
            let file = syn::parse_file(&std::fs::read_to_string(f).unwrap()).unwrap();
            let mut found = JsonMacros::default();
            found.visit_file(&file);
            (found.0 > 0).then(|| format!("{}: {} json!", f.display(), found.0))
        })
        .collect();
    assert!(built.is_empty(), "{}", built.join("\n"));
}

impl Crates {
    /// Where a path written in module `from` leads, through every `use`:
    /// the module it ends in followed by the rest of the path, or, when it
    /// leaves the crate, the outside crate's path.
    fn leads_to(&self, from: &[String], segs: &[String], depth: usize) -> Vec<String> {
        let Some(module) = self.modules.get(from) else {
            return segs.to_vec();
        };
        if depth > 16 || segs.is_empty() {
            return segs.to_vec();
        }
        let (mut cur, rest): (ModPath, &[String]) = match segs[0].as_str() {
            "crate" => (vec![from[0].clone()], &segs[1..]),
            "self" => (from.to_vec(), &segs[1..]),
            "super" => {
                let ups = segs.iter().take_while(|s| *s == "super").count();
                (
                    from[..from.len().saturating_sub(ups)].to_vec(),
                    &segs[ups..],
                )
            }
            name if module.children.contains(name) => (from.to_vec(), segs),
            name => match module.imports.get(name) {
                Some(target) if target[..] != segs[..1] => {
                    let mut full = target.clone();
                    full.extend_from_slice(&segs[1..]);
                    return self.leads_to(from, &full, depth + 1);
                }
                _ => return segs.to_vec(),
            },
        };
        for (i, seg) in rest.iter().enumerate() {
            let Some(m) = self.modules.get(&cur) else {
                break;
            };
            if m.children.contains(seg) {
                cur.push(seg.clone());
            } else if let Some(target) = m.imports.get(seg) {
                let mut full = target.clone();
                full.extend_from_slice(&rest[i + 1..]);
                return self.leads_to(&cur.clone(), &full, depth + 1);
            } else {
                cur.extend_from_slice(&rest[i..]);
                return cur;
            }
        }
        cur
    }
}

/// Forwarding names no metrics type: what the proxy counts it reports to
/// `observe` as typed events, and how they are counted (Prometheus, the
/// metrics module) is `observe`'s alone.
#[test]
fn the_proxy_names_no_metrics_type() {
    let crates = workspace();
    let proxy = ["tokenmeter", "proxy"].map(String::from);
    let metrics = ["tokenmeter", "observe", "metrics"].map(String::from);
    let mut found = Vec::new();
    for (path, module) in crates.modules.range(proxy.to_vec()..) {
        if !path.starts_with(&proxy) {
            break;
        }
        let imports = module.imports.values();
        for r in module.refs.iter().chain(imports) {
            let to = crates.leads_to(path, r, 0);
            if to.first().is_some_and(|c| c == "prometheus") || to.starts_with(&metrics) {
                found.push(format!("{} names {}", module.file.display(), r.join("::")));
            }
        }
    }
    assert!(found.is_empty(), "{}", found.join("\n"));
    // The check sees a path through a re-export.
    let source = "
        mod observe { pub mod metrics { pub struct Counter; } pub use metrics::Counter as C; }
        mod proxy { use prometheus::IntCounter; fn f(_: crate::observe::C) {} }
    ";
    let file = syn::parse_file(source).unwrap();
    let mut crates = Crates::default();
    crates.load_items(
        vec![String::from("tokenmeter")],
        Path::new("x.rs"),
        Path::new("."),
        &file.items,
    );
    let from = ["tokenmeter", "proxy"].map(String::from);
    let led: Vec<Vec<String>> = crates.modules[&from[..]]
        .refs
        .iter()
        .map(|r| crates.leads_to(&from, r, 0))
        .collect();
    assert!(led.iter().any(|to| to.starts_with(&metrics)), "{led:?}");
    assert!(led.iter().any(|to| to[0] == "prometheus"), "{led:?}");
}
