#!/usr/bin/env bash
# Fetch the files omnium delivered to your SFTP folder, the host's key pinned.
#
#   OMNIUM_SFTP_KEY=.omnium/dev/sftp-keys/client_key \
#   OMNIUM_SFTP_HOST_KEY="ssh-ed25519 AAAA..." ./sftp_fetch.sh
#
# curl pins the host by the SHA-256 of its public key (--hostpubsha256), made here from the key.
set -euo pipefail
HOST=${OMNIUM_SFTP_HOST:-127.0.0.1}
PORT=${OMNIUM_SFTP_PORT:-8022}
USER_NAME=${OMNIUM_SFTP_USER:-ndtv}
FOLDER=${OMNIUM_SFTP_FOLDER:-}
TARGET=${OMNIUM_SFTP_DIR:-omnium-files}
: "${OMNIUM_SFTP_KEY:?set OMNIUM_SFTP_KEY to your private key file}"
: "${OMNIUM_SFTP_HOST_KEY:?set OMNIUM_SFTP_HOST_KEY to the public key of the server (ssh-ed25519 AAAA...)}"
pin=$(printf '%s' "$OMNIUM_SFTP_HOST_KEY" | cut -d' ' -f2 | base64 -d | openssl dgst -sha256 -binary | base64)
base="sftp://$HOST:$PORT/~/${FOLDER:+$FOLDER/}"
sftp=(curl --silent --show-error --fail -u "$USER_NAME:" --key "$OMNIUM_SFTP_KEY" --hostpubsha256 "$pin")

mkdir -p "$TARGET"
# A folder's URL ends with /: curl lists it, one name a line (-l).
"${sftp[@]}" -l "$base" | while IFS= read -r name; do
  case $name in .* | "") continue ;; esac
  "${sftp[@]}" -o "$TARGET/$name" "$base$name"
  echo "$name  $(wc -c <"$TARGET/$name") bytes"
done
