//! `zcp generate`: man pages and shell completions, both from the clap definitions, so they
//! cannot drift from `--help`. Hidden commands (those `--help` leaves out) stay out of both.

use std::io::Write;
use std::path::{Path, PathBuf};

use clap::{Args, CommandFactory, Subcommand};
use clap_complete::Shell;

/// `zcp generate --help`'s examples, each a command line the tests parse.
pub(crate) const EXAMPLES: &str = "\
  zcp generate man /usr/local/share/man/man1       # zcp.1, zcp-send.1, zcp-serve.1, ...
  zcp generate completions bash                    # save as ~/.local/share/bash-completion/completions/zcp
  zcp generate completions zsh                     # save as _zcp in a directory on $fpath
  zcp generate completions fish                    # also elvish and powershell";

#[derive(Debug, Args)]
#[command(after_help = super::after_help(EXAMPLES, false))]
pub(crate) struct GenerateArgs {
    #[command(subcommand)]
    what: What,
}

#[derive(Debug, Subcommand)]
enum What {
    /// Write a man page (section 1) for zcp and for each of its subcommands into DIR.
    Man {
        /// An existing directory to write zcp.1, zcp-send.1, ... into (files there of the
        /// same names are replaced).
        #[arg(value_name = "DIR")]
        dir: PathBuf,
    },
    /// Print the completion script for SHELL on standard output.
    Completions {
        /// The shell to complete for.
        #[arg(value_name = "SHELL")]
        shell: Shell,
    },
}

pub(crate) fn run(a: GenerateArgs) -> anyhow::Result<i32> {
    match a.what {
        What::Man { dir } => {
            let written = write_man_pages(&dir)?;
            eprintln!(
                "zcp: wrote {} man pages into {}",
                written.len(),
                dir.display()
            );
            Ok(0)
        }
        What::Completions { shell } => {
            let mut out = Vec::new();
            clap_complete::generate(shell, &mut visible_command(), "zcp", &mut out);
            let mut stdout = std::io::stdout().lock();
            stdout.write_all(&out)?;
            stdout.flush()?;
            Ok(0)
        }
    }
}

/// zcp's command, built as `--help` sees it (subcommand names `zcp-send` and so on).
fn command() -> clap::Command {
    let mut cmd = super::Cli::command().disable_help_subcommand(true);
    cmd.build();
    cmd
}

/// zcp's command without its hidden subcommands, for the completion scripts (clap_complete,
/// unlike clap_mangen, would offer them). Only the top level has hidden ones.
fn visible_command() -> clap::Command {
    let full = super::Cli::command();
    let mut cmd = clap::Command::new("zcp")
        .version(env!("CARGO_PKG_VERSION"))
        .disable_help_subcommand(true)
        .subcommand_required(true)
        .args(full.get_arguments().cloned())
        .subcommands(full.get_subcommands().filter(|s| !s.is_hide_set()).cloned());
    cmd.build();
    cmd
}

/// Every man page, as (file name, roff text): zcp.1 first, then each visible subcommand
/// (and theirs: zcp-generate-man.1), depth first.
pub(crate) fn man_pages() -> std::io::Result<Vec<(String, Vec<u8>)>> {
    fn walk(cmd: &clap::Command, out: &mut Vec<(String, Vec<u8>)>) -> std::io::Result<()> {
        out.push(man_page(cmd)?);
        for sub in cmd.get_subcommands().filter(|s| !s.is_hide_set()) {
            walk(sub, out)?;
        }
        Ok(())
    }
    let mut out = Vec::new();
    walk(&command(), &mut out)?;
    Ok(out)
}

/// One command's man page: clap_mangen's sections, then the help text's closing examples and
/// exit codes as EXAMPLES and EXIT STATUS, kept line for line (clap_mangen would fill them
/// into one paragraph).
fn man_page(cmd: &clap::Command) -> std::io::Result<(String, Vec<u8>)> {
    let after = cmd.get_after_help().map(|t| t.to_string());
    let man = clap_mangen::Man::new(cmd.clone().after_help(None::<&str>))
        .source(format!("zcp {}", env!("CARGO_PKG_VERSION")));
    let mut text = Vec::new();
    man.render(&mut text)?;
    if let Some(after) = after {
        let (examples, exit_codes) = match after.split_once("\n\nExit codes:") {
            Some((e, c)) => (e, Some(c)),
            None => (after.as_str(), None),
        };
        let mut roff = roff::Roff::new();
        roff.control("SH", ["EXAMPLES"]).control("nf", []);
        for line in examples.trim_start_matches("Examples:\n").lines() {
            roff.text([roff::roman(line)]);
        }
        roff.control("fi", []);
        if let Some(codes) = exit_codes {
            roff.control("SH", ["EXIT STATUS"]);
            roff.text([roff::roman(
                codes.split_whitespace().collect::<Vec<_>>().join(" "),
            )]);
        }
        roff.to_writer(&mut text)?;
    }
    Ok((man.get_filename(), text))
}

/// Writes every man page into `dir`, each through a temporary file renamed into place, so
/// a failure leaves no half-written page; returns the paths written.
fn write_man_pages(dir: &Path) -> anyhow::Result<Vec<PathBuf>> {
    if !dir.is_dir() {
        let what = if dir.exists() {
            "is not a directory"
        } else {
            "does not exist"
        };
        super::usage!(
            "{} {what}; give an existing directory to write the man pages into",
            dir.display()
        );
    }
    let pages = man_pages()?;
    let mut written = Vec::with_capacity(pages.len());
    for (name, text) in pages {
        let path = dir.join(&name);
        let cannot = |e: std::io::Error| {
            anyhow::Error::new(super::Usage(format!(
                "cannot write {}: {e}; give a directory you can write to",
                path.display()
            )))
        };
        let mut tmp = tempfile::Builder::new()
            .prefix(&format!(".{name}."))
            .tempfile_in(dir)
            .map_err(cannot)?;
        tmp.write_all(&text).map_err(cannot)?;
        // Man pages are read by everyone: 0644, not the temporary file's 0600.
        std::fs::set_permissions(
            tmp.path(),
            std::os::unix::fs::PermissionsExt::from_mode(0o644),
        )
        .map_err(cannot)?;
        tmp.persist(&path).map_err(|e| cannot(e.error))?;
        written.push(path);
    }
    Ok(written)
}

#[cfg(test)]
mod tests {
    use clap::ValueEnum;

    use super::*;

    /// The visible subcommands, as `zcp --help` lists them.
    fn visible() -> Vec<String> {
        command()
            .get_subcommands()
            .filter(|s| !s.is_hide_set())
            .map(|s| s.get_name().to_owned())
            .collect()
    }

    #[test]
    fn a_man_page_for_every_visible_subcommand_and_none_for_hidden_ones() {
        let pages = man_pages().unwrap();
        let names: Vec<&str> = pages.iter().map(|(n, _)| n.as_str()).collect();
        assert_eq!(names[0], "zcp.1");
        for sub in visible() {
            let file = format!("zcp-{sub}.1");
            assert!(names.contains(&file.as_str()), "{file} missing: {names:?}");
        }
        for name in ["zcp-generate-man.1", "zcp-generate-completions.1"] {
            assert!(names.contains(&name), "{name} missing: {names:?}");
        }
        let hidden: Vec<_> = command()
            .get_subcommands()
            .filter(|s| s.is_hide_set())
            .map(|s| s.get_name().to_owned())
            .collect();
        assert!(hidden.contains(&"bench-chart".to_owned()));
        for h in hidden {
            assert!(!names.iter().any(|n| n.contains(&h)), "{h} in {names:?}");
            for (name, text) in &pages {
                let text = String::from_utf8_lossy(text);
                assert!(!text.contains(&h), "hidden {h} named in {name}");
            }
        }
    }

    #[test]
    fn man_pages_are_roff_with_the_help_texts_and_no_terminal_escapes() {
        for (name, text) in man_pages().unwrap() {
            let text = String::from_utf8(text).unwrap();
            let stem = name.trim_end_matches(".1");
            assert!(text.starts_with(".ie \\n(.g .ds Aq"), "{name}: {text:.80}");
            assert!(text.contains(&format!(".TH {stem} 1")), "{name}: no .TH");
            for section in [".SH NAME", ".SH SYNOPSIS", ".SH DESCRIPTION"] {
                assert!(text.contains(section), "{name}: no {section}");
            }
            // Every top-level page has its help text's examples.
            if name.matches('-').count() <= 1 {
                assert!(text.contains(".SH EXAMPLES\n.nf\n"), "{name}: no examples");
            }
            assert!(!text.contains('\x1b'), "{name}: an ANSI escape in the roff");
        }
        let pages = man_pages().unwrap();
        let serve = &pages.iter().find(|(n, _)| n == "zcp-serve.1").unwrap().1;
        let serve = String::from_utf8_lossy(serve);
        assert!(serve.contains("root"), "serve's --root missing");
        assert!(
            serve.contains("max\\-streams"),
            "serve's --max-streams missing"
        );
        // The examples line for line, the exit codes their own section.
        assert!(
            serve.contains(".nf\n  zcp serve \\-\\-root /data/incoming "),
            "{serve}"
        );
        assert!(serve.contains(".SH \"EXIT STATUS\"\n0 success;"), "{serve}");
    }

    #[test]
    fn completions_name_every_visible_subcommand_in_every_shell() {
        for shell in Shell::value_variants() {
            let mut out = Vec::new();
            clap_complete::generate(*shell, &mut visible_command(), "zcp", &mut out);
            let text = String::from_utf8(out).unwrap();
            for sub in visible() {
                assert!(text.contains(&sub), "{shell}: {sub} missing");
            }
            assert!(!text.contains("bench-chart"), "{shell}: hidden bench-chart");
            assert!(!text.contains("bench-side"), "{shell}: hidden bench-side");
        }
    }
}
