//! The rig's own binary: it starts and describes its options. (Its runs
//! are tested end to end through `tokenmeter bench --smoke`, in the root
//! package's tests; this test also makes `cargo test` build the binary that
//! `tokenmeter bench` runs.)

use std::process::Command;

#[test]
fn the_rig_describes_its_legs_and_load() {
    let out = Command::new(env!("CARGO_BIN_EXE_tokenmeter-bench"))
        .arg("--help")
        .output()
        .expect("runs");
    assert!(out.status.success(), "{out:?}");
    let help = String::from_utf8_lossy(&out.stdout);
    for option in ["--smoke", "--json", "--baseline-bin", "--tls"] {
        assert!(help.contains(option), "{option} in:\n{help}");
    }
}
