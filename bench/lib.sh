# bench/lib.sh — sourced by the bench scripts.

# The checkout a benchmark measures, for its header: the short commit, "+changes" when
# tracked files differ from it (the binary is then not that commit's), "?" outside git.
checkout_id() {
    local root=$1 dirty=""
    [[ -n "$(git -C "$root" status --porcelain --untracked-files=no 2>/dev/null)" ]] && dirty="+changes"
    echo "$(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$dirty"
}
