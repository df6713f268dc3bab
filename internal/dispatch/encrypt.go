package dispatch

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/ecdh"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"slices"
	"sync"
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
	return encryptTo(make([]byte, 0, recordSize), payload, uaPublic, nil, authSecret)
}

// encryptTo is encrypt appending the message to dst[:0], whose capacity
// should be recordSize (a pooled buffer, Send). ua is uaPublic parsed, or
// nil to parse it here.
func encryptTo(dst, payload, uaPublic []byte, ua *ecdh.PublicKey, authSecret []byte) ([]byte, error) {
	if len(payload) > MaxPayload {
		return nil, errPayloadTooLarge
	}
	as, err := ecdh.P256().GenerateKey(rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate ephemeral key: %w", err)
	}
	var salt [saltLen]byte
	rand.Read(salt[:])
	return seal(dst, payload, uaPublic, ua, authSecret, as, salt[:], plainLen)
}

// sealer holds the scratch of one encryption: two SHA-256 states for HMAC
// and the derived keys. Pooled: a hand-written HKDF over them allocates
// nothing, where crypto/hkdf allocated an HMAC and two hashes per step,
// five steps a message (bench a: 6% of the processor's allocations).
type sealer struct {
	inner, outer hash.Hash
	pad          [sha256.BlockSize]byte
	info         [len(keyInfo) + 2*pointLen + 1]byte
	secret       [32]byte // HMAC(auth_secret, ecdh_secret): PRK_key
	ikm, prk     [32]byte
	cek, nonce   [32]byte // the first 16 and 12 bytes are used
	sum          [32]byte
}

var sealers = sync.Pool{New: func() any { return &sealer{inner: sha256.New(), outer: sha256.New()} }}

// The HKDF info strings of RFC 8291 §3.3 and 3.4, each with the one-byte
// counter of the single HKDF-Expand block (T(1)) appended.
const keyInfo = "WebPush: info\x00"

var (
	cekInfo   = []byte("Content-Encoding: aes128gcm\x00\x01")
	nonceInfo = []byte("Content-Encoding: nonce\x00\x01")
)

// hmac sets out to HMAC-SHA256(key, msg) (RFC 2104); key is at most a
// block (64 bytes), as every key here is. HKDF-Extract(salt, ikm) is
// hmac(salt, ikm); HKDF-Expand(prk, info, L ≤ 32) is the first L bytes of
// hmac(prk, info || 0x01).
func (s *sealer) hmac(out *[32]byte, key, msg []byte) {
	clear(s.pad[:])
	copy(s.pad[:], key)
	for i := range s.pad {
		s.pad[i] ^= 0x36
	}
	s.inner.Reset()
	s.inner.Write(s.pad[:])
	s.inner.Write(msg)
	inner := s.inner.Sum(s.sum[:0])
	for i := range s.pad {
		s.pad[i] ^= 0x36 ^ 0x5c
	}
	s.outer.Reset()
	s.outer.Write(s.pad[:])
	s.outer.Write(inner)
	s.outer.Sum(out[:0])
}

// seal is encrypt with the sender's key pair as and salt given, and the
// plaintext (payload, delimiter, zeros) plainSize bytes long: the seam of
// the RFC 8291 Appendix A known-answer test, whose example is not padded.
// The message is appended to dst[:0].
func seal(dst, payload, uaPublic []byte, ua *ecdh.PublicKey, authSecret []byte, as *ecdh.PrivateKey, saltIn []byte, plainSize int) ([]byte, error) {
	if ua == nil {
		var err error
		if ua, err = ecdh.P256().NewPublicKey(uaPublic); err != nil {
			return nil, fmt.Errorf("subscription p256dh: %w", err)
		}
	}
	secret, err := as.ECDH(ua)
	if err != nil {
		return nil, fmt.Errorf("ecdh: %w", err)
	}
	asPublic := as.PublicKey().Bytes()

	body := slices.Grow(dst[:0], headerLen+plainSize+tagLen)[:headerLen]
	salt := body[:saltLen]
	copy(salt, saltIn)
	binary.BigEndian.PutUint32(body[saltLen:], recordSize)
	body[saltLen+4] = pointLen
	copy(body[saltLen+5:], asPublic)

	s := sealers.Get().(*sealer)
	defer sealers.Put(s)
	// IKM = HKDF(auth_secret, ecdh_secret, "WebPush: info" 0x00 ua_public as_public, 32).
	n := copy(s.info[:], keyInfo)
	n += copy(s.info[n:], uaPublic)
	n += copy(s.info[n:], asPublic)
	s.info[n] = 1
	s.hmac(&s.secret, authSecret, secret)
	s.hmac(&s.ikm, s.secret[:], s.info[:n+1])
	// PRK = HKDF-Extract(salt, IKM); CEK and nonce expand it.
	s.hmac(&s.prk, salt, s.ikm[:])
	s.hmac(&s.cek, s.prk[:], cekInfo)
	s.hmac(&s.nonce, s.prk[:], nonceInfo)
	block, err := aes.NewCipher(s.cek[:16])
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
	plain[n] = 2 // the last record's delimiter
	clear(plain[n+1:])
	sealed := gcm.Seal(plain[:0], s.nonce[:12], plain, nil)
	return body[:headerLen+len(sealed)], nil
}
