//! `zcp keygen`: write a fresh pre-shared key.

use std::io::Write;
use std::path::PathBuf;

use clap::Args;

/// `zcp keygen --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp keygen -o ~/.config/zcp/key                  # the default place; directories made 0700
  zcp keygen -o /etc/zcp/key --force               # replace an existing key
  zcp keygen -o -                                  # print it, to store on both hosts (0600)";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, false))]
pub(crate) struct KeygenArgs {
    /// Where to write the key (created with mode 0600; missing directories with 0700). `-`
    /// writes it to standard output.
    #[arg(short = 'o', long = "output", value_name = "FILE")]
    output: PathBuf,
    /// Replace the file if it exists.
    #[arg(long)]
    force: bool,
}

pub(crate) fn run(a: KeygenArgs) -> anyhow::Result<i32> {
    if a.output.as_os_str() == "-" {
        let psk = zcp_session::keyfile::new_key()?;
        let mut out = std::io::stdout().lock();
        out.write_all(psk.to_file_text().as_bytes())?;
        out.flush()?;
        eprintln!(
            "zcp: wrote a new key to standard output; store it in a file of mode 0600 on both hosts"
        );
        return Ok(0);
    }
    zcp_session::keyfile::write_new_key(&a.output, a.force)?;
    eprintln!(
        "zcp: wrote a new key to {} (mode 0600); copy it to the other host over a trusted channel",
        a.output.display()
    );
    Ok(0)
}
