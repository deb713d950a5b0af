# Sourced by the image's RUN steps that call pip (Dockerfile): the build secrets pip_index_url and
# pip_extra_index_url, where given, as pip's variables; they live in /run/secrets during that step
# only, so neither the image nor its history holds them. Empty build arguments are unset, as pip
# would take an empty PIP_CERT for a path.
for s in pip_index_url pip_extra_index_url; do
    v=$(echo "$s" | tr a-z A-Z)
    if [ -s "/run/secrets/$s" ]; then export "$v=$(cat "/run/secrets/$s")"; fi
done
for v in PIP_FIND_LINKS PIP_CERT; do eval "[ -n \"\${$v}\" ] || unset $v"; done
