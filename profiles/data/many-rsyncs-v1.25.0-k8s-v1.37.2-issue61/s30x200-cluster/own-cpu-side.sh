#!/usr/bin/env bash
# Side sampler: every 10 s, the CPU time (cpuacct.usage, ns) of every container running `objcount run`
# on the real node, by Pod name; ends when the node's cgroup is gone.
root=$(ls -d /sys/fs/cgroup/cpuacct/objcount-kubelet-* | head -1)
echo "t,pod,mode,cpu_ns"
while [ -d "$root" ]; do
  t=$(date +%s)
  for procs in $(find "$root" -name cgroup.procs 2>/dev/null); do
    p=$(head -1 "$procs" 2>/dev/null); [ -n "$p" ] || continue
    tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null | grep -q "objcount run" || continue
    env=$(tr '\0' '\n' < /proc/$p/environ 2>/dev/null)
    host=$(echo "$env" | sed -n 's/^HOSTNAME=//p'); mode=$(echo "$env" | sed -n 's/^OBJCOUNT_MODE=//p')
    echo "$t,$host,$mode,$(cat "$(dirname "$procs")/cpuacct.usage" 2>/dev/null)"
  done
  sleep 10
done
