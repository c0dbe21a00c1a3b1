//! Tree filters: rsync's `--exclude` / `--include` rules, as the sender's walk applies them.
//!
//! A rule is `- PATTERN` (exclude) or `+ PATTERN` (include), in the order given; the first rule
//! that matches an entry decides, and an entry no rule matches is sent. An excluded directory
//! is not entered, so nothing beneath it is sent either. Patterns follow rsync:
//!
//! - `*` matches anything but `/`, `?` one character but `/`, `[...]` a class; `**` as a
//!   whole component (`**/x`, `a/**/b`, `x/**`) matches across directories (elsewhere, as in
//!   `**.gz`, it is `*`: unlike rsync, it does not cross `/` there).
//! - Unlike rsync, `{a,b}` matches either (globset's syntax); `[{]` is a literal brace.
//! - A pattern with no `/` (trailing `/` aside) and no `**` matches the entry's name at any
//!   depth: `*.tmp`, `.git`.
//! - One that starts with `/` is anchored at the top of the tree being copied (the directory
//!   named on the command line): `/build` is only the top-level `build`. Any other pattern with
//!   a `/` matches the end of the entry's path: `logs/*.gz` matches `a/logs/x.gz`.
//! - A trailing `/` matches directories only: `cache/`.
//! - A trailing `/***` matches the directory and everything beneath it.
//!
//! Paths are relative to the copied directory, so only entries *inside* a tree are filtered:
//! a source named on the command line is always sent. Rules cross the wire as text in
//! [`crate::Open::filters`] (a `get` is filtered by the server's walk), so both sides parse
//! them here, with the same bounds.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use globset::{Candidate, GlobBuilder, GlobSet, GlobSetBuilder};

/// Most rules one session may carry.
pub const MAX_FILTER_RULES: usize = 1000;
/// Longest rule, in bytes, its `- ` or `+ ` included.
pub const MAX_FILTER_RULE: usize = 1024;
/// Most bytes all of a session's rules may take together (they travel in one `Open`).
pub const MAX_FILTER_BYTES: usize = 32 * 1024;

/// Why a rule cannot be used; names the rule.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FilterError {
    /// More rules than [`MAX_FILTER_RULES`], or longer than the byte bounds.
    #[error("{0}")]
    Limit(String),
    /// A rule that does not parse.
    #[error("{kind} pattern {pattern:?}: {why}")]
    Pattern {
        /// `exclude` or `include`.
        kind: &'static str,
        /// The pattern as given.
        pattern: String,
        /// What is wrong with it.
        why: String,
    },
    /// Text that is not `- PATTERN` or `+ PATTERN`.
    #[error("filter rule {0:?} is neither \"- PATTERN\" nor \"+ PATTERN\"")]
    Form(String),
}

/// One rule as typed: include or exclude, and the pattern.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FilterRule {
    /// `+` (`--include`) rather than `-` (`--exclude`).
    pub include: bool,
    /// The pattern, as given.
    pub pattern: String,
}

impl FilterRule {
    /// An exclude rule.
    pub fn exclude(pattern: impl Into<String>) -> FilterRule {
        FilterRule {
            include: false,
            pattern: pattern.into(),
        }
    }

    /// An include rule.
    pub fn include(pattern: impl Into<String>) -> FilterRule {
        FilterRule {
            include: true,
            pattern: pattern.into(),
        }
    }

    /// How the rule travels: `- PATTERN` or `+ PATTERN`.
    pub fn to_wire(&self) -> String {
        format!("{} {}", if self.include { '+' } else { '-' }, self.pattern)
    }

    /// The rule a wire text (or a line of an `--exclude-from` file in that form) names.
    pub fn from_wire(text: &str) -> Result<FilterRule, FilterError> {
        match text.split_at_checked(2) {
            Some(("- ", p)) => Ok(FilterRule::exclude(p)),
            Some(("+ ", p)) => Ok(FilterRule::include(p)),
            _ => Err(FilterError::Form(text.to_string())),
        }
    }

    fn kind(&self) -> &'static str {
        if self.include { "include" } else { "exclude" }
    }
}

/// Compiled rules; [`Filter::default`] excludes nothing.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    rules: Vec<Compiled>,
    /// Patterns matched against the entry's name alone; `names_rule[i]` is the rule of glob i.
    names: GlobSet,
    names_rule: Vec<usize>,
    /// Patterns matched against the entry's path in the tree.
    paths: GlobSet,
    paths_rule: Vec<usize>,
}

#[derive(Debug, Clone)]
struct Compiled {
    include: bool,
    dirs_only: bool,
}

impl Filter {
    /// Compiles `rules`, checking the bounds a peer must also keep.
    pub fn new(rules: &[FilterRule]) -> Result<Filter, FilterError> {
        check_bounds(rules.iter().map(|r| r.pattern.len() + 2))?;
        let (mut names, mut paths) = (GlobSetBuilder::new(), GlobSetBuilder::new());
        let mut f = Filter::default();
        for (i, rule) in rules.iter().enumerate() {
            let bad = |why: String| FilterError::Pattern {
                kind: rule.kind(),
                pattern: rule.pattern.clone(),
                why,
            };
            let mut p = rule.pattern.as_str();
            let dirs_only = p.len() > 1 && p.ends_with('/');
            if dirs_only {
                p = &p[..p.len() - 1];
            }
            let anchored = p.starts_with('/');
            let p = p.trim_start_matches('/');
            if p.is_empty() {
                return Err(bad("matches nothing: give a name or a glob".into()));
            }
            // `dir/***`: the directory itself and everything beneath it.
            let (p, beneath) = match p.strip_suffix("/***") {
                Some(base) if !base.is_empty() => (base, true),
                _ => (p, false),
            };
            let mut globs = vec![p.to_string()];
            if beneath {
                globs.push(format!("{p}/**"));
            }
            let by_name = !anchored && !beneath && !p.contains('/') && !p.contains("**");
            for g in globs {
                let g = if by_name || anchored || g.starts_with("**") {
                    g
                } else {
                    format!("**/{g}")
                };
                let glob = GlobBuilder::new(&g)
                    .literal_separator(true)
                    .backslash_escape(true)
                    .build()
                    .map_err(|e| bad(e.kind().to_string()))?;
                if by_name {
                    names.add(glob);
                    f.names_rule.push(i);
                } else {
                    paths.add(glob);
                    f.paths_rule.push(i);
                }
            }
            f.rules.push(Compiled {
                include: rule.include,
                dirs_only,
            });
        }
        let build = |b: GlobSetBuilder| {
            b.build()
                .map_err(|e| FilterError::Limit(format!("filter rules too complex: {e}")))
        };
        f.names = build(names)?;
        f.paths = build(paths)?;
        Ok(f)
    }

    /// Parses and compiles rules as they came in [`crate::Open::filters`].
    pub fn from_wire(texts: &[String]) -> Result<Filter, FilterError> {
        check_bounds(texts.iter().map(String::len))?;
        let rules = texts
            .iter()
            .map(|t| FilterRule::from_wire(t))
            .collect::<Result<Vec<_>, _>>()?;
        Filter::new(&rules)
    }

    /// Whether no rule was given (nothing is ever excluded).
    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }

    /// Whether the entry at `path` (relative to the copied directory, `/`-separated, raw
    /// bytes; its last component is the entry's name) is left out.
    pub fn excludes(&self, path: &[u8], is_dir: bool) -> bool {
        if self.rules.is_empty() {
            return false;
        }
        let name = path.rsplit(|&b| b == b'/').next().unwrap_or(path);
        let first = |set: &GlobSet, rule_of: &[usize], text: &[u8]| {
            let c = Candidate::new(Path::new(OsStr::from_bytes(text)));
            set.matches_candidate(&c)
                .into_iter()
                .map(|g| rule_of[g])
                .filter(|&r| is_dir || !self.rules[r].dirs_only)
                .min()
        };
        let by_name = first(&self.names, &self.names_rule, name);
        let by_path = first(&self.paths, &self.paths_rule, path);
        match by_name.into_iter().chain(by_path).min() {
            Some(r) => !self.rules[r].include,
            None => false,
        }
    }
}

fn check_bounds(lens: impl Iterator<Item = usize>) -> Result<(), FilterError> {
    let (mut count, mut total) = (0usize, 0usize);
    for len in lens {
        count += 1;
        total += len;
        if len > MAX_FILTER_RULE {
            return Err(FilterError::Limit(format!(
                "a filter rule of {len} bytes is over the limit of {MAX_FILTER_RULE}"
            )));
        }
    }
    if count > MAX_FILTER_RULES {
        return Err(FilterError::Limit(format!(
            "{count} filter rules are over the limit of {MAX_FILTER_RULES}"
        )));
    }
    if total > MAX_FILTER_BYTES {
        return Err(FilterError::Limit(format!(
            "filter rules of {total} bytes together are over the limit of {MAX_FILTER_BYTES}"
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn f(rules: &[&str]) -> Filter {
        let rules: Vec<String> = rules.iter().map(|s| s.to_string()).collect();
        Filter::from_wire(&rules).unwrap()
    }

    fn out(f: &Filter, path: &str) -> bool {
        f.excludes(path.as_bytes(), false)
    }

    fn out_dir(f: &Filter, path: &str) -> bool {
        f.excludes(path.as_bytes(), true)
    }

    #[test]
    fn a_name_pattern_matches_at_any_depth() {
        let x = f(&["- *.tmp", "- .git"]);
        assert!(out(&x, "a.tmp"));
        assert!(out(&x, "d/e/a.tmp"));
        assert!(!out(&x, "a.tmpx"));
        assert!(out_dir(&x, "src/.git"));
        // `*` stops at `/`: the name is what it sees.
        assert!(!out(&x, "x.tmp/keep"));
    }

    #[test]
    fn anchored_and_slashed_patterns_match_paths() {
        let x = f(&["- /build", "- logs/*.gz"]);
        assert!(out_dir(&x, "build"));
        assert!(!out_dir(&x, "src/build"));
        assert!(out(&x, "logs/a.gz"));
        assert!(out(&x, "a/b/logs/a.gz"));
        assert!(!out(&x, "logs/sub/a.gz"));
        assert!(!out(&x, "xlogs/a.gz"));
    }

    #[test]
    fn a_trailing_slash_matches_directories_only() {
        let x = f(&["- cache/"]);
        assert!(out_dir(&x, "a/cache"));
        assert!(!out(&x, "a/cache"));
    }

    #[test]
    fn the_first_matching_rule_decides() {
        // rsync's idiom: only *.fits, in every directory.
        let x = f(&["+ *.fits", "+ */", "- *"]);
        assert!(!out(&x, "a.fits"));
        assert!(!out(&x, "d/e/a.fits"));
        assert!(!out_dir(&x, "d"));
        assert!(out(&x, "d/a.txt"));
        let y = f(&["- *", "+ *.fits"]);
        assert!(out(&y, "a.fits"));
    }

    #[test]
    fn double_star_and_triple_star() {
        let x = f(&["- /data/**/raw", "- /keep/***"]);
        assert!(out(&x, "data/raw"));
        assert!(out(&x, "data/a/b/raw"));
        assert!(!out(&x, "other/data/raw"));
        assert!(out_dir(&x, "keep"));
        assert!(out(&x, "keep/a/b"));
        assert!(!out(&x, "keeper"));
    }

    #[test]
    fn non_utf8_names_are_matched_by_their_bytes() {
        let x = f(&["- *.tmp"]);
        assert!(x.excludes(b"d/\xff\xfe.tmp", false));
        assert!(!x.excludes(b"d/\xff\xfe.dat", false));
    }

    #[test]
    fn no_rules_exclude_nothing() {
        let x = Filter::default();
        assert!(x.is_empty());
        assert!(!out(&x, "anything"));
    }

    #[test]
    fn bad_rules_are_named() {
        let e = Filter::new(&[FilterRule::exclude("{a,b")]).unwrap_err();
        assert!(e.to_string().contains("exclude pattern \"{a,b\""), "{e}");
        let e = Filter::new(&[FilterRule::include("[ab")]).unwrap_err();
        assert!(e.to_string().contains("include pattern \"[ab\""), "{e}");
        let e = Filter::new(&[FilterRule::exclude("/")]).unwrap_err();
        assert!(e.to_string().contains("matches nothing"), "{e}");
        assert!(matches!(
            FilterRule::from_wire("* x"),
            Err(FilterError::Form(_))
        ));
        let many = vec!["- a".to_string(); MAX_FILTER_RULES + 1];
        assert!(matches!(
            Filter::from_wire(&many),
            Err(FilterError::Limit(_))
        ));
        let long = vec![format!("- {}", "a".repeat(MAX_FILTER_RULE))];
        assert!(matches!(
            Filter::from_wire(&long),
            Err(FilterError::Limit(_))
        ));
    }

    #[test]
    fn rules_round_trip_as_text() {
        for r in [FilterRule::exclude("a b/*"), FilterRule::include("+ odd")] {
            assert_eq!(FilterRule::from_wire(&r.to_wire()).unwrap(), r);
        }
    }
}
