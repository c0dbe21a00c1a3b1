//! `zcp keygen`: write a fresh pre-shared key.

use std::path::PathBuf;

use clap::Args;

#[derive(Debug, Args)]
pub(crate) struct KeygenArgs {
    /// Where to write the key (created with mode 0600).
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// Replace the file if it exists.
    #[arg(long)]
    force: bool,
}

pub(crate) fn run(a: KeygenArgs) -> anyhow::Result<i32> {
    zcp_session::keyfile::write_new_key(&a.output, a.force)?;
    eprintln!(
        "zcp: wrote a new key to {} (mode 0600); copy it to the other host over a trusted channel",
        a.output.display()
    );
    Ok(0)
}
