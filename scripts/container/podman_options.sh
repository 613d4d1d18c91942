# podman options that work on machines like the CI and development hosts (sourced):
# runc, because crun cannot start containers under their cgroup setup; the host's network (no
# bridge to set up, and a multi-node job's store and Gloo need the host's addresses anyway); and
# an open-files limit no higher than the host's, which podman's default (1048576) exceeds.
podman_global=(--runtime runc)
podman_build=(--network host --ulimit nofile=20000:20000)
podman_run=(--network host --ulimit nofile=20000:20000 --init)
