//! `--exclude`, `--include`, `--exclude-from`, `--include-from`: rsync's tree filters, in the
//! order they were given on the command line (the first rule that matches decides).

use std::path::{Path, PathBuf};

use clap::ArgMatches;
use zcp_wire::FilterRule;

use super::usage;

/// The filter flags, as [`clap`] parsed them.
#[derive(Debug, Clone, Default, clap::Args)]
pub(crate) struct FilterArgs {
    /// Leave out what PATTERN matches inside the trees sent (repeatable). rsync's patterns:
    /// `*.tmp` or `.git` match a name at any depth, `/build` only at the top of the copied
    /// directory, `logs/*.gz` the end of a path, `cache/` directories only, `**` as a whole
    /// component (`a/**/b`) across directories, `{a,b}` either (`[{]` for a brace); an
    /// excluded directory is not entered. With --include, the first rule
    /// that matches decides, in the order given. Sources named on the command line are always
    /// sent. In a get, the server's walk applies them (and this side refuses what they leave
    /// out).
    #[arg(long, value_name = "PATTERN")]
    exclude: Vec<String>,
    /// Keep what PATTERN matches even where a later --exclude would leave it out (repeatable):
    /// `--include '*.fits' --include '*/' --exclude '*'` sends only *.fits files, in every
    /// directory.
    #[arg(long, value_name = "PATTERN")]
    include: Vec<String>,
    /// Read exclude patterns from FILE, one per line (blank lines and lines starting with #
    /// or ; are skipped; a line `+ PATTERN` is an include). `-` reads standard input.
    #[arg(long, value_name = "FILE")]
    exclude_from: Vec<PathBuf>,
    /// Read include patterns from FILE, one per line, as --exclude-from does.
    #[arg(long, value_name = "FILE")]
    include_from: Vec<PathBuf>,
    /// Every flag above, in command-line order (filled by [`FilterArgs::order`]).
    #[arg(skip)]
    ordered: Vec<(usize, Given)>,
}

/// One filter flag as given.
#[derive(Debug, Clone)]
enum Given {
    Exclude(String),
    Include(String),
    ExcludeFrom(PathBuf),
    IncludeFrom(PathBuf),
}

impl FilterArgs {
    /// Records the order the flags came in, from the subcommand's matches.
    pub(crate) fn order(&mut self, m: &ArgMatches) {
        let given = [
            (
                "exclude",
                self.exclude.iter().cloned().map(Given::Exclude).collect(),
            ),
            (
                "include",
                self.include.iter().cloned().map(Given::Include).collect(),
            ),
            (
                "exclude_from",
                self.exclude_from
                    .iter()
                    .cloned()
                    .map(Given::ExcludeFrom)
                    .collect(),
            ),
            (
                "include_from",
                self.include_from
                    .iter()
                    .cloned()
                    .map(Given::IncludeFrom)
                    .collect(),
            ),
        ];
        let mut all = Vec::new();
        for (id, values) in given {
            let values: Vec<Given> = values;
            if let Some(at) = m.indices_of(id) {
                all.extend(at.zip(values));
            }
        }
        all.sort_by_key(|(at, _)| *at);
        self.ordered = all;
    }

    /// The rules, in order, with the files read; a file that cannot be read is a usage
    /// error naming it.
    pub(crate) fn rules(&self) -> anyhow::Result<Vec<FilterRule>> {
        let mut rules = Vec::new();
        for (_, g) in &self.ordered {
            match g {
                Given::Exclude(p) => rules.push(rule(p, false)),
                Given::Include(p) => rules.push(rule(p, true)),
                Given::ExcludeFrom(f) => rules.extend(from_file(f, false)?),
                Given::IncludeFrom(f) => rules.extend(from_file(f, true)?),
            }
        }
        if let Err(e) = zcp_wire::Filter::new(&rules) {
            usage!("{}", zcp_wire::escape_text(&e.to_string()));
        }
        Ok(rules)
    }
}

/// A pattern as rsync reads it: `- PATTERN` and `+ PATTERN` say which kind they are.
fn rule(p: &str, include: bool) -> FilterRule {
    FilterRule::from_wire(p).unwrap_or(FilterRule {
        include,
        pattern: p.to_string(),
    })
}

fn from_file(path: &Path, include: bool) -> anyhow::Result<Vec<FilterRule>> {
    let text = if path == Path::new("-") {
        std::io::read_to_string(std::io::stdin())
    } else {
        std::fs::read_to_string(path)
    };
    let shown = || zcp_wire::escape(std::os::unix::ffi::OsStrExt::as_bytes(path.as_os_str()));
    let text = match text {
        Ok(t) => t,
        Err(e) => usage!(
            "--{}-from {}: {e}",
            if include { "include" } else { "exclude" },
            shown()
        ),
    };
    Ok(text
        .lines()
        .map(|l| l.strip_suffix('\r').unwrap_or(l))
        .filter(|l| !l.trim().is_empty() && !l.starts_with('#') && !l.starts_with(';'))
        .map(|l| rule(l, include))
        .collect())
}
