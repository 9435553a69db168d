#!/bin/sh
# layers.sh: the layer rule, checked on the sources (docs/ARCHITECTURE.md,
# "Layers"). Each folder may include, with quotes, only its own headers and
# those of the layers below it; no include names a path with a slash (which
# would reach past the build's include folders). The build enforces the same
# by giving each layer's library only its own and its dependencies' include
# folders; this also catches an include of a lower layer's private header.
# usage: layers.sh SOURCE_DIR
cd "${1:-.}" || exit 2
fail=0
check() {   # folder, allowed headers
  dir=$1
  shift
  for f in "$dir"/*.c "$dir"/*.h "$dir"/*.y "$dir"/*.l; do
    [ -f "$f" ] || continue
    for h in $(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f"); do
      ok=0
      for a in "$@"; do [ "$h" = "$a" ] && ok=1; done
      if [ $ok -eq 0 ]; then
        echo "$f includes \"$h\": not a header of its layer or of one below it"
        fail=1
      fi
    done
  done
}
check runtime dtrt.h dtrt_int.h
check ir      dtrt.h ir.h ops.def interp_int.h
check frontend dtrt.h ir.h frontend.h ast.h lower_int.h builtins.def parse.tab.h
check passes  dtrt.h ir.h ops.def passes.h plan_int.h
check codegen dtrt.h ir.h codegen.h
# tools may also include the headers dtc generates for dtc-probe's models
# (tools/probe/), which stand on dtrt.h alone
check tools   dtrt.h ir.h frontend.h passes.h codegen.h probe_gemm_layer.h probe_gemm_thin.h \
  probe_gemm_deep.h probe_gemm_batched.h probe_rows.h probe_rows_small.h probe_bag.h \
  probe_attn16.h probe_attn64.h probe_attn32.h probe_sparse.h
[ $fail -eq 0 ] && echo "layers: every include is of the folder's own layer or one below"
exit $fail
