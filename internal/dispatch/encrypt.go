package dispatch

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/hkdf"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
)

// Sizes of an RFC 8291 message: one aes128gcm record of recordSize bytes
// after a header of salt, record size, key id length and the sender's
// uncompressed P-256 public key.
const (
	recordSize = 4096
	saltLen    = 16
	pointLen   = 65
	tagLen     = 16
	headerLen  = saltLen + 4 + 1 + pointLen
	// plainLen is the padded plaintext: payload, the 0x02 delimiter of
	// the last record, zeros. Every body is recordSize bytes, as
	// webpush-go sends them, so the length says nothing of the payload.
	plainLen = recordSize - tagLen - headerLen
	// MaxPayload is the largest payload that fits: 3993 bytes.
	MaxPayload = plainLen - 1
)

// errPayloadTooLarge is a payload over MaxPayload.
var errPayloadTooLarge = errors.New("payload too large for one 4096-byte aes128gcm record")

// encrypt seals payload for the subscription whose public key is uaPublic
// and auth secret is authSecret (RFC 8291 §3, RFC 8188 aes128gcm), with a
// fresh key pair and salt, padded to one full record. It never writes to
// payload.
func encrypt(payload, uaPublic, authSecret []byte) ([]byte, error) {
	if len(payload) > MaxPayload {
		return nil, errPayloadTooLarge
	}
	as, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ephemeral key: %w", err)
	}
	var salt [saltLen]byte
	rand.Read(salt[:])
	return seal(payload, uaPublic, authSecret, as, salt[:], plainLen)
}

// seal is encrypt with the sender's key pair as and salt given, and the
// plaintext (payload, delimiter, zeros) plainSize bytes long: the seam of
// the RFC 8291 Appendix A known-answer test, whose example is not padded.
func seal(payload, uaPublic, authSecret []byte, as *ecdh.PrivateKey, saltIn []byte, plainSize int) ([]byte, error) {
	ua, err := ecdh.P256().NewPublicKey(uaPublic)
	if err != nil {
		return nil, fmt.Errorf("subscription p256dh: %w", err)
	}
	secret, err := as.ECDH(ua)
	if err != nil {
		return nil, fmt.Errorf("ecdh: %w", err)
	}
	asPublic := as.PublicKey().Bytes()

	body := make([]byte, headerLen, headerLen+plainSize+tagLen)
	salt := body[:saltLen]
	copy(salt, saltIn)
	binary.BigEndian.PutUint32(body[saltLen:], recordSize)
	body[saltLen+4] = pointLen
	copy(body[saltLen+5:], asPublic)

	// IKM = HKDF(auth_secret, ecdh_secret, "WebPush: info" 0x00 ua_public as_public, 32).
	var info [14 + 2*pointLen]byte
	n := copy(info[:], "WebPush: info\x00")
	n += copy(info[n:], uaPublic)
	copy(info[n:], asPublic)
	ikm, err := hkdf.Key(sha256.New, secret, authSecret, string(info[:]), 32)
	if err != nil {
		return nil, fmt.Errorf("derive ikm: %w", err)
	}
	prk, err := hkdf.Extract(sha256.New, ikm, salt)
	if err != nil {
		return nil, fmt.Errorf("derive prk: %w", err)
	}
	cek, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: aes128gcm\x00", 16)
	if err != nil {
		return nil, fmt.Errorf("derive cek: %w", err)
	}
	nonce, err := hkdf.Expand(sha256.New, prk, "Content-Encoding: nonce\x00", 12)
	if err != nil {
		return nil, fmt.Errorf("derive nonce: %w", err)
	}
	block, err := aes.NewCipher(cek)
	if err != nil {
		return nil, fmt.Errorf("aes: %w", err)
	}
	gcm, err := cipher.NewGCM(block)
	if err != nil {
		return nil, fmt.Errorf("gcm: %w", err)
	}
	// The plaintext is built in place after the header and sealed over
	// itself (dst = plaintext[:0] is allowed).
	plain := body[headerLen : headerLen+plainSize]
	n = copy(plain, payload)
	plain[n] = 2 // the last record's delimiter; the rest is already zero
	sealed := gcm.Seal(plain[:0], nonce, plain, nil)
	return body[:headerLen+len(sealed)], nil
}
