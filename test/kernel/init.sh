#!/bin/sh
# /init of the blkcrypt kernel-test initramfs (test/kernel/init.sh).
# Mounts the pseudo file systems, loads the modules listed in
# /etc/kt/modules, links the virtio disks as /dev/disk/<serial>, runs
# /kt/run.sh between markers on the serial console and powers off.
/bin/busybox mount -t proc proc /proc
/bin/busybox --install -s
export PATH=/sbin:/usr/sbin:/bin:/usr/bin
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mount -t tmpfs tmpfs /run
mount -t tmpfs tmpfs /tmp
mkdir -p /dev/disk /run/cryptsetup
# Nothing on demand: every module is loaded below, and a failing
# request_module must not wait for a helper.
echo /bin/true > /proc/sys/kernel/modprobe
echo "@@KT-TIME init $(cut -d" " -f1 /proc/uptime)"
rel=$(uname -r)
for m in $(cat /etc/kt/modules); do
	insmod /lib/modules/$rel/$m.ko 2>/tmp/insmod.err || echo "@@KT-WARN insmod $m: $(cat /tmp/insmod.err)"
done
want=$(cat /etc/kt/ndisks)
i=0
while [ "$(ls -d /sys/block/vd* 2>/dev/null | wc -l)" -lt "$want" ] && [ $i -lt 100 ]; do
	sleep 0.1
	i=$((i + 1))
done
for b in /sys/block/vd*; do
	[ -e "$b" ] || continue
	s=$(cat $b/serial 2>/dev/null)
	[ -n "$s" ] && ln -s /dev/${b##*/} /dev/disk/$s
done
echo "@@KT-TIME disks $(cut -d" " -f1 /proc/uptime)"
cd /kt
echo "@@KT-BEGIN"
sh /kt/run.sh
rc=$?
echo ""
echo "@@KT-TIME script $(cut -d" " -f1 /proc/uptime)"
echo "@@KT-END rc=$rc"
echo "@@KT-DMESG"
dmesg | tail -n 200
sync
echo "@@KT-POWEROFF"
poweroff -f
