#!/usr/bin/env bash
# Installs the .deb packaging/build-deb.sh built into this machine (root only), checks that
# everything is in place and works, then purges it and checks that it is gone. The package is
# purged on every exit, pass or fail. Refuses to run where a zcp is already installed, so it
# never replaces or removes anything it did not put there. Usage: packaging/check-deb.sh DEB
set -euo pipefail
deb=${1:?usage: packaging/check-deb.sh target/debian/zcp_VERSION_ARCH.deb}
[ "$(id -u)" = 0 ] || { echo "check-deb: must run as root (dpkg -i)" >&2; exit 1; }
for p in /usr/bin/zcp /etc/zcp /var/lib/zcp /var/log/zcp; do
    if [ -e "$p" ]; then
        echo "check-deb: $p exists: zcp is installed here already; not touching it" >&2
        exit 1
    fi
done
if dpkg-query -W zcp >/dev/null 2>&1 || getent passwd zcp >/dev/null || getent group zcp >/dev/null; then
    echo "check-deb: the zcp package, user or group exists already; not touching it" >&2
    exit 1
fi

fail() { echo "check-deb: FAILED: $*" >&2; exit 1; }
# On any exit before the end: everything this script made goes (none of it existed before).
cleanup() {
    dpkg --purge zcp >/dev/null 2>&1 || true
    rm -rf /etc/zcp /var/lib/zcp /var/log/zcp
    if getent passwd zcp >/dev/null; then deluser --system --quiet zcp >/dev/null 2>&1 || true; fi
    if getent group zcp >/dev/null; then delgroup --system --quiet zcp >/dev/null 2>&1 || true; fi
}
trap cleanup EXIT

dpkg -i "$deb"
for f in /usr/bin/zcp /usr/lib/systemd/system/zcp.service /etc/zcp/zcp.toml \
    /usr/share/man/man1/zcp.1.gz /usr/share/man/man1/zcp-serve.1.gz \
    /usr/share/man/man1/zcp-send.1.gz /usr/share/bash-completion/completions/zcp \
    /usr/share/zsh/vendor-completions/_zcp /usr/share/fish/vendor_completions.d/zcp.fish \
    /usr/share/doc/zcp/operating.md; do
    [ -f "$f" ] || fail "$f missing"
done
grep -qx '/etc/zcp/zcp.toml' /var/lib/dpkg/info/zcp.conffiles || fail "zcp.toml is no conffile"
/usr/bin/zcp --version | grep -q '^zcp ' || fail "zcp --version"
page=$(MANWIDTH=80 man -l /usr/share/man/man1/zcp-serve.1.gz 2>&1)
grep -q -- '--max-streams' <<<"$page" || fail "man -l zcp-serve.1.gz: $page"
bash -n /usr/share/bash-completion/completions/zcp || fail "bash completion"
# The completion works: `zcp se<TAB>` offers send and serve.
words=$(bash -c 'source /usr/share/bash-completion/completions/zcp
    COMP_WORDS=(zcp se); COMP_CWORD=1; COMP_LINE="zcp se"; COMP_POINT=${#COMP_LINE}
    _zcp zcp se zcp; printf "%s\n" "${COMPREPLY[@]}" | sort | tr "\n" " "')
[ "$words" = "send serve " ] || fail "bash completion of 'zcp se': '$words'"
getent passwd zcp | grep -q ':/usr/sbin/nologin$' || fail "zcp user: $(getent passwd zcp)"
getent group zcp >/dev/null || fail "zcp group"
for d in /var/lib/zcp/incoming /var/log/zcp /etc/zcp/keys; do
    [ "$(stat -c %U:%G "$d")" = zcp:zcp ] || fail "$d is $(stat -c %U:%G "$d")"
done
MANPATH=/usr/share/man systemd-analyze verify /usr/lib/systemd/system/zcp.service \
    || fail "systemd-analyze verify"
# The zcp user can create its key where the default config looks for it.
setpriv --reuid zcp --regid zcp --clear-groups /usr/bin/zcp keygen -o /etc/zcp/keys/default.key \
    || fail "keygen as zcp"
# With that key the packaged config is one the service can start with, as its user.
setpriv --reuid zcp --regid zcp --clear-groups /usr/bin/zcp serve --check-config \
    --config /etc/zcp/zcp.toml >/dev/null || fail "zcp serve --check-config on /etc/zcp/zcp.toml"

# Purged with a key in place: the key and the user owning it stay; everything else goes.
dpkg --purge zcp
for f in /usr/bin/zcp /usr/lib/systemd/system/zcp.service /etc/zcp/zcp.toml /var/log/zcp \
    /var/lib/zcp /usr/share/man/man1/zcp.1.gz /usr/share/bash-completion/completions/zcp; do
    [ ! -e "$f" ] || fail "$f still there after purge"
done
[ -f /etc/zcp/keys/default.key ] || fail "purge deleted the key"
getent passwd zcp >/dev/null || fail "purge removed the user owning the key"

# Installed over the kept user and key, then purged without the key: nothing is left.
dpkg -i "$deb" >/dev/null
[ "$(stat -c %U /var/lib/zcp/incoming)" = zcp ] || fail "reinstall: /var/lib/zcp/incoming"
rm /etc/zcp/keys/default.key
dpkg --purge zcp
for f in /usr/bin/zcp /etc/zcp /var/lib/zcp /var/log/zcp; do
    [ ! -e "$f" ] || fail "$f still there after purge"
done
getent passwd zcp >/dev/null && fail "zcp user still there after purge"
getent group zcp >/dev/null && fail "zcp group still there after purge"
dpkg-query -W zcp >/dev/null 2>&1 && fail "package still known to dpkg after purge"
trap - EXIT
echo "check-deb: ok"
