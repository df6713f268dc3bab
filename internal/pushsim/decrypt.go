package pushsim

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// MaxBodySize is the largest push message body accepted (RFC 8291 §4: 4096 octets, which
// leaves at most 3993 octets of plaintext).
const MaxBodySize = 4096

// Errors returned by Decrypt. Both mean the push service answers 400.
var (
	// ErrMalformed is a body whose aes128gcm header or record layout is invalid.
	ErrMalformed = errors.New("malformed aes128gcm body")
	// ErrDecrypt is a well-formed body that does not authenticate or unpad with this key.
	ErrDecrypt = errors.New("decrypt aes128gcm body")
)

const (
	saltLen      = 16
	headerLen    = saltLen + 4 + 1 // salt | rs | idlen
	pointLen     = 65              // uncompressed P-256 point
	tagLen       = 16
	authLen      = 16
	minRecordLen = tagLen + 1 // the padding delimiter at least
)

// Decrypt opens an RFC 8291 push message body (RFC 8188 aes128gcm, a single record) sent to the
// subscription whose private key is key and whose auth secret is authSecret, and returns the
// plaintext with its padding removed. The header must be salt(16) | rs(4) | idlen(1) = 65 |
// keyid = the sender's uncompressed P-256 public key.
func Decrypt(body []byte, key *ecdh.PrivateKey, authSecret []byte) ([]byte, error) {
	if len(authSecret) != authLen {
		return nil, fmt.Errorf("%w: auth secret is %d bytes, want %d", ErrDecrypt, len(authSecret), authLen)
	}
	if len(body) < headerLen {
		return nil, fmt.Errorf("%w: body is %d bytes, shorter than the %d-byte header", ErrMalformed, len(body), headerLen)
	}
	salt := body[:saltLen]
	rs := binary.BigEndian.Uint32(body[saltLen : saltLen+4])
	idlen := int(body[saltLen+4])
	if rs < minRecordLen+1 { // RFC 8188 §2.1: values smaller than 18 are invalid
		return nil, fmt.Errorf("%w: record size %d, want >= 18", ErrMalformed, rs)
	}
	if idlen != pointLen {
		return nil, fmt.Errorf("%w: keyid is %d bytes, want %d", ErrMalformed, idlen, pointLen)
	}
	if len(body) < headerLen+idlen {
		return nil, fmt.Errorf("%w: body is %d bytes, shorter than its header", ErrMalformed, len(body))
	}
	keyid := body[headerLen : headerLen+idlen]
	record := body[headerLen+idlen:]
	if len(record) < minRecordLen {
		return nil, fmt.Errorf("%w: record is %d bytes, want >= %d", ErrMalformed, len(record), minRecordLen)
	}
	if uint64(len(record)) > uint64(rs) {
		return nil, fmt.Errorf("%w: %d bytes of records with record size %d: more than one record", ErrMalformed, len(record), rs)
	}
	senderPub, err := ecdh.P256().NewPublicKey(keyid)
	if err != nil {
		return nil, fmt.Errorf("%w: keyid: %v", ErrMalformed, err)
	}
	secret, err := key.ECDH(senderPub)
	if err != nil {
		return nil, fmt.Errorf("%w: ecdh: %v", ErrDecrypt, err)
	}

	// RFC 8291 §3.3-3.4: IKM = HKDF(auth_secret, ecdh_secret, "WebPush: info" 0x00 ua_public as_public, 32).
	uaPub := key.PublicKey().Bytes()
	info := make([]byte, 0, 14+2*pointLen)
	info = append(info, "WebPush: info\x00"...)
	info = append(info, uaPub...)
	info = append(info, keyid...)
	ikm, err := hkdf.Key(sha256.New, secret, authSecret, string(info), 32)
	if err != nil {
		return nil, fmt.Errorf("%w: derive ikm: %v", ErrDecrypt, err)
	}
	// RFC 8188 §2.2-2.3: CEK and NONCE from PRK = HKDF-Extract(salt, IKM).
	prk, err := hkdf.Extract(sha256.New, ikm, salt)
	if err != nil {
		return nil, fmt.Errorf("%w: extract prk: %v", ErrDecrypt, err)
	}
	cek, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, fmt.Errorf("%w: derive cek: %v", ErrDecrypt, err)
	}
	nonce, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, fmt.Errorf("%w: derive nonce: %v", ErrDecrypt, err)
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, fmt.Errorf("%w: aes: %v", ErrDecrypt, err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("%w: gcm: %v", ErrDecrypt, err)
	}
	// Record sequence number 0: the nonce is used as derived.
	plain, err := gcm.Open(nil, nonce, record, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrDecrypt, err)
	}
	// Padding: data | 0x02 | 0x00*; the last (only) record must end with delimiter 0x02.
	i := len(plain) - 1
	for i >= 0 && plain[i] == 0 {
		i--
	}
	if i < 0 {
		return nil, fmt.Errorf("%w: no padding delimiter", ErrDecrypt)
	}
	if plain[i] != 2 {
		return nil, fmt.Errorf("%w: padding delimiter is %#x, want 0x02 (last record)", ErrDecrypt, plain[i])
	}
	out := make([]byte, i)
	copy(out, plain[:i])
	return out, nil
}
