# podman options that work on machines like the CI and development hosts (sourced):
# runc, because crun cannot start containers under their cgroup setup; the host's network (no
# bridge to set up, and a multi-node job's store and Gloo need the host's addresses anyway); and
# limits no higher than the host lets podman set: podman's defaults for open files (1048576) and,
# in `run`, processes (4194304) exceed them and runc then fails with "error setting rlimit".
podman_global=(--runtime runc)
podman_build=(--network host --ulimit nofile=20000:20000)
podman_run=(--network host --ulimit nofile=20000:20000 --ulimit nproc=32768:32768 --init)
