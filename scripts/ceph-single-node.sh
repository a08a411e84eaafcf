#!/bin/bash
# A throwaway single-node Ceph cluster (one monitor, one OSD on memstore, no auth, loopback only),
# for tests and benchmarks of blkcrypt over RBD: internal/cephtest and bench/rbd.sh start it. It is
# ../shared/ceph/single-node.sh kept in the repository (so CI needs nothing beside it), with one
# admin socket per client process. Needs Debian's ceph-mon ceph-osd ceph-common
# (and qemu-block-extra for qemu's rbd driver).
#
#   single-node.sh start DIR [MEM_MIB]   start it under DIR; prints CEPH_CONF=DIR/ceph.conf
#   single-node.sh stop DIR              stop both daemons (by their pid files) and remove DIR
#
# Then: export CEPH_CONF=DIR/ceph.conf; rbd create --size 256M rbd/vol; rbd encryption format rbd/vol luks2 PASSFILE
# qemu reaches an image as "rbd:rbd/vol:conf=$CEPH_CONF" or with driver=rbd,pool=rbd,image=vol,conf=...
set -euo pipefail
cmd=${1:?start|stop}; R=${2:?directory}
case $cmd in
stop)
  pids=""; for p in "$R"/*.pid; do [[ -f $p ]] && pids="$pids $(cat "$p")"; done
  for p in $pids; do kill "$p" 2>/dev/null || true; done
  for i in $(seq 50); do alive=""; for p in $pids; do kill -0 "$p" 2>/dev/null && alive=1; done; [[ -z $alive ]] && break; sleep 0.1; done
  for p in $pids; do kill -9 "$p" 2>/dev/null || true; done
  rm -rf "$R"; exit 0 ;;
start) ;;
*) echo "usage: $0 start|stop DIR" >&2; exit 1 ;;
esac
MEM=${3:-2048}
for t in ceph-mon ceph-osd ceph monmaptool rbd uuidgen; do command -v $t >/dev/null || { echo "missing $t (apt-get install ceph-mon ceph-osd ceph-common uuid-runtime)" >&2; exit 1; }; done
rm -rf "$R"; mkdir -p "$R/mon" "$R/osd0" "$R/log"
# a free loopback port for the monitor
PORT=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
FSID=$(uuidgen)
cat >"$R/ceph.conf" <<C
[global]
fsid = $FSID
mon host = 127.0.0.1:$PORT
mon initial members = a
auth cluster required = none
auth service required = none
auth client required = none
osd objectstore = memstore
memstore device bytes = $((MEM << 20))
osd pool default size = 1
osd pool default min size = 1
mon allow pool size one = true
mon allow pool delete = true
mon warn on pool no redundancy = false
osd crush chooseleaf type = 0
ms bind ipv4 = true
ms bind ipv6 = false
public network = 127.0.0.0/8
log file = $R/log/\$name.log
run dir = $R
admin socket = $R/\$name.asok
pid file = $R/\$name.pid
osd max object name len = 256
osd max object namespace len = 64
[client]
# every client process (rbd, qemu-nbd, qemu-img) its own admin socket: a
# shared one makes all but the first print a bind error
admin socket = $R/\$name.\$pid.asok
log file = $R/log/\$name.\$pid.log
[mon.a]
mon data = $R/mon
mon addr = 127.0.0.1:$PORT
[osd.0]
osd data = $R/osd0
C
export CEPH_CONF=$R/ceph.conf
monmaptool --create --add a "127.0.0.1:$PORT" --fsid "$FSID" "$R/monmap" >/dev/null
ceph-mon --mkfs -i a --monmap "$R/monmap" >/dev/null 2>&1
ceph-mon -i a
for i in $(seq 30); do timeout 5 ceph mon stat >/dev/null 2>&1 && break; sleep 1; done
OSDUUID=$(uuidgen)
timeout 20 ceph osd new "$OSDUUID" 0 >/dev/null
ceph-osd -i 0 --mkfs --osd-uuid "$OSDUUID" >/dev/null 2>&1
ceph-osd -i 0 >/dev/null 2>&1
for i in $(seq 60); do timeout 5 ceph osd stat 2>/dev/null | grep -q '1 up' && break; sleep 1; done
timeout 30 ceph osd pool create rbd 8 >/dev/null 2>&1
timeout 30 rbd pool init rbd
echo "CEPH_CONF=$CEPH_CONF"
