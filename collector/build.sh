#!/usr/bin/env bash
# Builds the real programs otel-joules' end-to-end tests run against, from Go modules only:
#   otelcol-joules  the Collector distribution in builder-config.yaml
#   jaeger          Jaeger v2 all-in-one (tools/jaeger), in-memory storage
#   prometheus      Prometheus 3.5 (tools/prometheus), for created-timestamp ingestion
#   ferretdb        FerretDB 1.24 (tools/ferretdb), a MongoDB wire-protocol server on SQLite
#
# Usage: collector/build.sh [--out DIR]      (default: collector/_build, ignored by git)
#
# Idempotent: a program whose inputs (its manifest or go.mod/go.sum, the Go version, this
# script's flags) have not changed since its last build is not rebuilt. Go's module and build
# caches (GOMODCACHE, GOCACHE) are reused, so a changed input rebuilds only what changed.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
out="$here/_build"

usage() { sed -n '2,12p' "$0" | sed 's/^# \{0,1\}//'; }

while [ $# -gt 0 ]; do
    case "$1" in
        --out) [ $# -ge 2 ] || { echo "build.sh: --out needs a directory" >&2; exit 2; }; out=$2; shift 2 ;;
        --out=*) out=${1#--out=}; shift ;;
        -h|--help) usage; exit 0 ;;
        *) echo "build.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
done

command -v go >/dev/null 2>&1 || { echo "build.sh: needs Go (1.24 or newer) on PATH" >&2; exit 2; }
mkdir -p "$out"
out=$(cd "$out" && pwd)

# Pure-Go binaries (FerretDB's SQLite is modernc's): no C toolchain, no libc coupling.
export CGO_ENABLED=0
# The tools modules live inside this repository's git tree; stamping VCS data is of no use.
export GOFLAGS="${GOFLAGS:-} -buildvcs=false"
build_flags=(-trimpath -ldflags=-s\ -w)
go_version=$(go env GOVERSION)

# up_to_date NAME FILE...: true when $out/NAME exists and was built from these exact inputs.
stamp_of() { { echo "$go_version ${build_flags[*]} CGO_ENABLED=$CGO_ENABLED"; cat "$@"; } | sha256sum | cut -d' ' -f1; }
up_to_date() {
    local name=$1; shift
    [ -x "$out/$name" ] && [ -f "$out/.$name.stamp" ] && [ "$(cat "$out/.$name.stamp")" = "$(stamp_of "$@")" ]
}
mark_built() { local name=$1; shift; stamp_of "$@" > "$out/.$name.stamp"; }

timed() { local start=$SECONDS; "$@"; echo "build.sh:   done in $((SECONDS - start)) s"; }

build_collector() {
    local manifest="$here/builder-config.yaml"
    local builder_version
    builder_version=$(sed -n 's/^  version: *//p' "$manifest")
    if up_to_date otelcol-joules "$manifest"; then
        echo "build.sh: otelcol-joules is up to date ($out/otelcol-joules)"; return
    fi
    echo "build.sh: building otelcol-joules $builder_version from builder-config.yaml"
    mkdir -p "$out/bin"
    GOBIN="$out/bin" go install "go.opentelemetry.io/collector/cmd/builder@v$builder_version"
    # The manifest's output_path is for users running the builder by hand in collector/;
    # here the generated sources go under --out.
    sed "s|^  output_path: .*|  output_path: $out/otelcol-joules-src|" "$manifest" > "$out/builder-config.yaml"
    "$out/bin/builder" --config "$out/builder-config.yaml"
    cp "$out/otelcol-joules-src/otelcol-joules" "$out/otelcol-joules.new"
    mv "$out/otelcol-joules.new" "$out/otelcol-joules"
    mark_built otelcol-joules "$manifest"
}

# build_tool NAME PACKAGE: go build PACKAGE in tools/NAME (a module of its own, whose go.mod
# pins the version and whose go.sum pins every checksum) into $out/NAME.
build_tool() {
    local name=$1 package=$2 module="$here/tools/$1"
    if up_to_date "$name" "$module/go.mod" "$module/go.sum"; then
        echo "build.sh: $name is up to date ($out/$name)"; return
    fi
    echo "build.sh: building $name ($(go -C "$module" list -m -f '{{.Version}}' "${package%%/cmd/*}"))"
    go -C "$module" build "${build_flags[@]}" -o "$out/$name.new" "$package"
    mv "$out/$name.new" "$out/$name"
    mark_built "$name" "$module/go.mod" "$module/go.sum"
}

# build_ferretdb: FerretDB's build/version package panics at start-up unless
# build/version/version.txt (made from git in FerretDB's own repository, absent from the module
# zip) names the version. So it is built from a copy of the module that has that file, through a
# go.mod that replaces the module by the copy (the same go.sum: nothing else changes or is fetched),
# and the binary must start (--version) before it replaces the old one.
ferretdb_marker="build/version/version.txt added"
build_ferretdb() {
    local module="$here/tools/ferretdb" work="$out/ferretdb-build" version src
    if up_to_date ferretdb "$module/go.mod" "$module/go.sum" <(echo "$ferretdb_marker"); then
        echo "build.sh: ferretdb is up to date ($out/ferretdb)"; return
    fi
    version=$(go -C "$module" list -m -f '{{.Version}}' github.com/FerretDB/FerretDB)
    # list -m names no Dir until the module is in the module cache (a fresh machine's is empty).
    go -C "$module" mod download github.com/FerretDB/FerretDB
    src=$(go -C "$module" list -m -f '{{.Dir}}' github.com/FerretDB/FerretDB)
    if [ -z "$src" ] || [ ! -d "$src" ]; then
        echo "build.sh: FerretDB's module source not found after go mod download" >&2; exit 1
    fi
    echo "build.sh: building ferretdb ($version)"
    rm -rf "$work"
    mkdir -p "$work"
    cp -R "$src" "$work/FerretDB"
    chmod -R u+w "$work/FerretDB"
    echo "$version" > "$work/FerretDB/build/version/version.txt"
    cp "$module/go.mod" "$module/go.sum" "$work/"
    go -C "$work" mod edit -replace github.com/FerretDB/FerretDB=./FerretDB
    GOFLAGS="$GOFLAGS -mod=mod" go -C "$work" build "${build_flags[@]}" -o "$out/ferretdb.new" github.com/FerretDB/FerretDB/cmd/ferretdb
    "$out/ferretdb.new" --version >/dev/null
    mv "$out/ferretdb.new" "$out/ferretdb"
    rm -rf "$work"
    mark_built ferretdb "$module/go.mod" "$module/go.sum" <(echo "$ferretdb_marker")
}

timed build_collector
timed build_tool jaeger github.com/jaegertracing/jaeger/cmd/jaeger
timed build_tool prometheus github.com/prometheus/prometheus/cmd/prometheus
timed build_ferretdb
echo "build.sh: all built in $out"
