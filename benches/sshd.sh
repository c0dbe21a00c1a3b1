# Sourced by benches/ssh.sh and benches/encrypt.sh: an sshd of its own on 127.0.0.1 with
# throwaway host and user keys in "$W" (root, as sshd needs). Sets PORT, OPTS (ssh's options
# to log in with the key) and SSH (the whole ssh command). The caller's EXIT trap kills it
# through "$W/sshd.pid".
ssh-keygen -q -t ed25519 -N "" -f "$W/host_key"
ssh-keygen -q -t ed25519 -N "" -f "$W/id"
cp "$W/id.pub" "$W/authorized_keys"
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
cat >"$W/sshd_config" <<SSHD
Port $PORT
ListenAddress 127.0.0.1
HostKey $W/host_key
PidFile $W/sshd.pid
AuthorizedKeysFile $W/authorized_keys
PermitRootLogin prohibit-password
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
StrictModes no
PrintMotd no
SSHD
mkdir -p /run/sshd
/usr/sbin/sshd -f "$W/sshd_config"
sleep 0.5
OPTS="-F /dev/null -i $W/id -o StrictHostKeyChecking=no -o UserKnownHostsFile=/dev/null -o LogLevel=ERROR"
SSH="ssh $OPTS -p $PORT"
