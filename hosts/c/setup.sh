#!/usr/bin/env bash
# The C host's third-party parts, fetched from the package registries into hosts/c/build/deps (or $1).
# Nothing is installed system-wide and the system's apt sources are left alone: apt reads its own lists
# from build/apt. What comes from where (hosts/c/README.md says why):
#   - ONNX Runtime headers, C API 21: Debian trixie's libonnxruntime-dev 1.21.0 (the headers only;
#     Debian bookworm has no onnxruntime package);
#   - the ONNX Runtime shared library: libonnxruntime.so.1.32.0 from PyPI's onnxruntime 1.32.0 manylinux
#     wheel (a zip; only that file is taken out of it), the version the Python runtime runs. The C API is
#     versioned and kept backward compatible: the library serves the API version 21 the headers ask for,
#     and it has the contrib operators `onnxformer optimize` writes (GroupQueryAttention with an attention
#     bias needs 1.22 or later);
#   - cJSON (JSON parser, MIT): Debian bookworm's libcjson-dev and libcjson1;
#   - for the tokenizer: PCRE2 (the pre-tokenizers' regular expressions, with Unicode properties; BSD) from
#     Debian bookworm's libpcre2-dev and libpcre2-8-0, and utf8proc (Unicode normalization forms, case and
#     categories; MIT) from libutf8proc-dev and libutf8proc2.
# Needs: apt-get, dpkg-deb and a Python with pip (PYTHON, default python3); re-running is a no-op.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
deps=${1:-$here/build/deps}
# The headers' version (Debian's package) and the library's (PyPI's wheel).
ORT_VERSION=1.21.0
ORT_LIBRARY_VERSION=1.32.0
# Raised when the set of packages changes, so that an older build/deps is fetched again.
DEPS_REVISION=3
# The wheel pip resolves for ORT_LIBRARY_VERSION (cp311, manylinux_2_28); its sha256 is checked after download.
ORT_WHEEL_SHA256=${ORT_WHEEL_SHA256:-5a34fc4dfeb5a7b4a74c95dcba1e773d722abda720b474edf1b0c419dc6d163d}
PYTHON=${PYTHON:-python3}
stamp="$deps/.complete-$ORT_VERSION-r$DEPS_REVISION"

if [[ -f "$stamp" ]]; then
  exit 0
fi

for tool in apt-get dpkg-deb "$PYTHON"; do
  if ! command -v "$tool" >/dev/null; then
    echo "hosts/c/setup.sh: $tool is missing; on Debian: apt-get install -y build-essential python3-pip" >&2
    exit 1
  fi
done

work="$here/build/apt"
rm -rf "$deps" "$work"
mkdir -p "$deps" "$work/downloads"

# One private apt configuration per Debian suite: its own sources, lists and cache.
fetch_debs() { # suite-name "sources line(s)" packages...
  local name=$1 sources=$2
  shift 2
  local dir="$work/$name"
  mkdir -p "$dir/lists/partial" "$dir/cache/archives/partial"
  printf '%s\n' "$sources" >"$dir/sources.list"
  local opts=(
    -o "Dir::Etc::SourceList=$dir/sources.list" -o "Dir::Etc::SourceParts=/dev/null"
    -o "Dir::State::Lists=$dir/lists" -o "Dir::Cache=$dir/cache" -o "Dir::State::status=/dev/null"
    -o "Debug::NoLocking=1" -o "APT::Sandbox::User=$(id -un)"
  )
  apt-get "${opts[@]}" -qq update
  (cd "$work/downloads" && apt-get "${opts[@]}" -qq download "$@")
}

# The archives are the ones this machine's apt is already configured with (deb822 .sources files or
# sources.list), found by the suite they serve: no archive is named here.
configured_uri() { # suite -> the first URI configured for it
  local suite=$1
  {
    awk -v s="$suite" '$1 == "deb" { for (i = 2; i < NF; i++) if ($i ~ /:\/\//) { if ($(i + 1) == s) print $i; break } }' \
      /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null
    awk -v s="$suite" 'BEGIN { RS = "" } {
        uri = ""; found = 0; n = split($0, lines, "\n")
        for (j = 1; j <= n; j++) {
          if (lines[j] ~ /^URIs:/) { sub(/^URIs:[ \t]*/, "", lines[j]); split(lines[j], u, " "); uri = u[1] }
          if (lines[j] ~ /^Suites:/ && (" " lines[j] " ") ~ (" " s " ")) found = 1
        }
        if (found && uri != "") print uri
      }' /etc/apt/sources.list.d/*.sources 2>/dev/null
  } | head -n 1
}
archive=$(configured_uri bookworm)
security=$(configured_uri bookworm-security)
if [[ -z "$archive" || -z "$security" ]]; then
  echo "hosts/c/setup.sh: apt has no source for Debian bookworm and bookworm-security configured;" \
    "add Debian's archives to /etc/apt/sources.list.d, then re-run" >&2
  exit 1
fi
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
fetch_debs trixie "deb [signed-by=$keyring] $archive trixie main" libonnxruntime-dev
fetch_debs bookworm "deb [signed-by=$keyring] $archive bookworm main
deb [signed-by=$keyring] $security bookworm-security main" libcjson1 libcjson-dev libpcre2-8-0 libpcre2-dev \
  libutf8proc2 libutf8proc-dev

for deb in "$work"/downloads/*.deb; do
  dpkg-deb -x "$deb" "$deps"
done
ort_deb_version=$(dpkg-deb -f "$work"/downloads/libonnxruntime-dev_*.deb Version)
if [[ "$ort_deb_version" != "$ORT_VERSION"+* ]]; then
  echo "hosts/c/setup.sh: Debian's libonnxruntime-dev is $ort_deb_version, not $ORT_VERSION; set" \
    "ORT_VERSION in hosts/c/setup.sh to its upstream version (the library must be that version or newer)" >&2
  exit 1
fi

"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
  --platform manylinux_2_28_x86_64 --dest "$work/downloads" "onnxruntime==$ORT_LIBRARY_VERSION"
wheel=$(ls "$work"/downloads/onnxruntime-"$ORT_LIBRARY_VERSION"-*.whl)
if [[ -n "$ORT_WHEEL_SHA256" ]]; then
  echo "$ORT_WHEEL_SHA256  $wheel" | sha256sum --check --quiet
fi
mkdir -p "$deps/lib"
"$PYTHON" - "$wheel" "$deps/lib" "$ORT_LIBRARY_VERSION" <<'EOF'
import sys, zipfile
wheel, out, version = sys.argv[1:]
name = f"onnxruntime/capi/libonnxruntime.so.{version}"
with zipfile.ZipFile(wheel) as archive:
    data = archive.read(name)
with open(f"{out}/libonnxruntime.so.{version}", "wb") as handle:
    handle.write(data)
EOF
ln -sf "libonnxruntime.so.$ORT_LIBRARY_VERSION" "$deps/lib/libonnxruntime.so.1"
ln -sf "libonnxruntime.so.1" "$deps/lib/libonnxruntime.so"
# The shared objects (the -dev packages' .so links point at the runtime packages' files).
cp -P "$deps"/usr/lib/x86_64-linux-gnu/libcjson.so* "$deps"/usr/lib/x86_64-linux-gnu/libpcre2-8.so* \
  "$deps"/usr/lib/x86_64-linux-gnu/libutf8proc.so* "$deps/lib/"
rm -rf "$work" # the lists and downloads (about 60 MB) are not needed once unpacked
touch "$stamp"
echo "hosts/c/setup.sh: ONNX Runtime $ORT_LIBRARY_VERSION ($ort_deb_version headers), cJSON, PCRE2 and utf8proc in" \
  "$deps"
