package topology

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Signature errors, all wrapping ErrBadSignature.
var (
	ErrBadSignature = errors.New("bad signature")
	errSigMissing   = fmt.Errorf("%w: push-sig missing", ErrBadSignature)
	errSigMalformed = fmt.Errorf("%w: push-sig malformed", ErrBadSignature)
	errSigMismatch  = fmt.Errorf("%w: push-sig does not match", ErrBadSignature)
	errSigExpired   = fmt.Errorf("%w: push-sig expired", ErrBadSignature)
)

// MinKeyLen is the shortest HMAC key a Signer accepts.
const MinKeyLen = 32

// Signer signs and verifies retry records: HMAC-SHA256 over the topic, an
// expiry, every push-* routing header in order and the value. The first key
// signs; all keys verify, so keys can be rotated by prepending a new one.
type Signer struct {
	keys [][]byte
}

// NewSigner returns a Signer; keys[0] signs, every key verifies.
func NewSigner(keys ...[]byte) (*Signer, error) {
	if len(keys) == 0 {
		return nil, errors.New("no hmac key")
	}
	for i, k := range keys {
		if len(k) < MinKeyLen {
			return nil, fmt.Errorf("hmac key %d is %d bytes, want at least %d", i, len(k), MinKeyLen)
		}
	}
	return &Signer{keys: keys}, nil
}

// Sign returns the push-sig value for a record about to be produced to
// topic with headers hs (which must not yet hold push-sig) and value.
func (s *Signer) Sign(topic string, hs []kgo.RecordHeader, value []byte, expires time.Time) string {
	exp := strconv.FormatInt(expires.Unix(), 10)
	mac := s.mac(s.keys[0], topic, exp, hs, value)
	return "v1." + exp + "." + base64.RawURLEncoding.EncodeToString(mac)
}

// Verify checks r's push-sig at now. The error wraps ErrBadSignature.
func (s *Signer) Verify(r *kgo.Record, now time.Time) error {
	var sig string
	found := false
	for _, h := range r.Headers {
		if h.Key == HeaderSig {
			if found {
				return errSigMalformed
			}
			sig, found = string(h.Value), true
		}
	}
	if !found {
		return errSigMissing
	}
	rest, ok := strings.CutPrefix(sig, "v1.")
	if !ok {
		return errSigMalformed
	}
	exp, b64, ok := strings.Cut(rest, ".")
	if !ok {
		return errSigMalformed
	}
	expUnix, err := strconv.ParseInt(exp, 10, 64)
	if err != nil {
		return errSigMalformed
	}
	got, err := base64.RawURLEncoding.DecodeString(b64)
	// The decoder skips \r and \n and ignores stray low bits: accept only
	// the one canonical spelling, so a signature cannot be varied.
	if err != nil || len(got) != sha256.Size || base64.RawURLEncoding.EncodeToString(got) != b64 {
		return errSigMalformed
	}
	for _, k := range s.keys {
		if hmac.Equal(got, s.mac(k, r.Topic, exp, r.Headers, r.Value)) {
			if now.Unix() > expUnix {
				return errSigExpired
			}
			return nil
		}
	}
	return errSigMismatch
}

func (s *Signer) mac(key []byte, topic, exp string, hs []kgo.RecordHeader, value []byte) []byte {
	m := hmac.New(sha256.New, key)
	field := func(b []byte) { writeField(m, b) }
	field([]byte("tierpush-retry-v1"))
	field([]byte(topic))
	field([]byte(exp))
	for _, h := range hs {
		if h.Key == HeaderSig || !strings.HasPrefix(h.Key, "push-") {
			continue
		}
		field([]byte(h.Key))
		field(h.Value)
	}
	field(value)
	return m.Sum(nil)
}

func writeField(h hash.Hash, b []byte) {
	var n [8]byte
	binary.BigEndian.PutUint64(n[:], uint64(len(b)))
	h.Write(n[:])
	h.Write(b)
}
