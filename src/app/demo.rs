//! `tokenmeter sim` and `tokenmeter demo`. (Filled in once the simulator lands.)

use super::cli::{DemoArgs, SimArgs};

pub(crate) async fn run_sim(args: SimArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not yet")
}

pub(crate) async fn run_demo(args: DemoArgs) -> anyhow::Result<()> {
    let _ = args;
    anyhow::bail!("not yet")
}
