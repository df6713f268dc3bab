#!/bin/sh
# Writes openssl.json: VAPID key pairs as OpenSSL writes them, through the
# recipes found in Web Push guides, for a 32-byte scalar and one whose
# leading byte is zero (one key in 256; keys are generated until one turns
# up, none is made up):
#   - the DER of `openssl ec`: the scalar, padded to 32 bytes, at offset 7;
#     the public key, the last 65 bytes of the SubjectPublicKeyInfo;
#   - turned into base64url (tr -d '='; tr '/+' '_-') or left as the
#     standard base64 that `base64` writes, padded;
#   - the hex that `openssl ec -text` prints, decoded.
#
#   sh gen-openssl.sh > openssl.json
set -eu
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
ver=$(openssl version | cut -d' ' -f1-2)

scalar() { openssl ec -in "$1" -outform DER 2>/dev/null | tail -c +8 | head -c 32; }
public() { openssl ec -in "$1" -pubout -outform DER 2>/dev/null | tail -c 65; }
texthex() { openssl ec -in "$1" -noout -text 2>/dev/null | sed -n '/^priv:/,/^pub:/p' | sed '1d;$d' | tr -d ' :\n'; }
b64() { base64 -w0; }
b64url() { base64 -w0 | tr -d '=' | tr '/+' '_-'; }

row() { # tool how scalar_bytes public private
	printf '%s{"tool": "%s", "how": "%s", "scalar_bytes": %d, "public_key": "%s", "private_key": "%s"}\n' \
		"$sep" "$1" "$2" "$3" "$4" "$5"
	sep=', '
}

sep=''
echo '['
for want in 32 31; do
	while :; do
		openssl ecparam -name prime256v1 -genkey -noout -out "$dir/k.pem"
		lead=$(scalar "$dir/k.pem" | head -c 1 | od -An -tu1 | tr -d ' ')
		if [ "$want" = 32 ] && [ "$lead" != 0 ]; then break; fi
		if [ "$want" = 31 ] && [ "$lead" = 0 ]; then
			second=$(scalar "$dir/k.pem" | head -c 2 | tail -c 1 | od -An -tu1 | tr -d ' ')
			[ "$second" != 0 ] && break
		fi
	done
	k="$dir/k.pem"
	row "$ver" "openssl ec -outform DER | tail -c +8 | head -c 32 | base64 | tr -d = | tr /+ _-" "$want" \
		"$(public "$k" | b64url)" "$(scalar "$k" | b64url)"
	row "$ver" "openssl ec -outform DER | tail -c +8 | head -c 32 | base64" "$want" \
		"$(public "$k" | b64)" "$(scalar "$k" | b64)"
	row "$ver" "openssl ec -text: the priv hex | xxd -r -p | base64" "$want" \
		"$(public "$k" | b64)" "$(texthex "$k" | xxd -r -p | b64)"
done
echo ']'
