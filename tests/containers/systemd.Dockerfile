# A clean Debian 12 machine with systemd as its init, for tests/containers/debian-install.sh: the
# project's debootstrap base (stoker-base:bookworm) plus systemd, nothing of stoker. Run it with
# --privileged (systemd mounts its cgroups and sets up the units' sandboxing namespaces).
ARG BASE=stoker-base:bookworm
FROM ${BASE}
RUN apt-get update \
 && apt-get install -y --no-install-recommends systemd systemd-sysv dbus procps \
 && rm -rf /var/lib/apt/lists/* \
 && systemctl mask getty.target console-getty.service systemd-firstboot.service \
      systemd-udevd.service systemd-modules-load.service sys-kernel-config.mount \
      sys-kernel-debug.mount sys-kernel-tracing.mount \
 && systemctl set-default multi-user.target
ENV container=docker
STOPSIGNAL SIGRTMIN+3
CMD ["/sbin/init"]
