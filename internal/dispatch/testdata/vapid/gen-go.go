//go:build ignore

// Writes go.json: VAPID key pairs as webpush-go's GenerateVAPIDKeys writes
// them (the scalar padded to 32 bytes, base64url) and as Go code that
// writes crypto/ecdsa's D.Bytes() does (leading zero bytes dropped), with
// 32-, 31- and 30-byte scalars. Keys are generated until each length turns
// up; none is made up.
//
//	go run gen-go.go > go.json
package main

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"os"
	"runtime/debug"

	webpush "github.com/SherClockHolmes/webpush-go"
)

type row struct {
	Tool        string `json:"tool"`
	How         string `json:"how"`
	ScalarBytes int    `json:"scalar_bytes"`
	PublicKey   string `json:"public_key"`
	PrivateKey  string `json:"private_key"`
}

// significant is the scalar's length without its leading zero bytes.
func significant(b []byte) int {
	n := len(b)
	for _, c := range b {
		if c != 0 {
			break
		}
		n--
	}
	return n
}

func main() {
	version := "webpush-go"
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == "github.com/SherClockHolmes/webpush-go" {
				version += " " + d.Version
			}
		}
	}
	var rows []row
	found := map[int]bool{}
	for len(found) < 3 {
		priv, pub, err := webpush.GenerateVAPIDKeys()
		if err != nil {
			panic(err)
		}
		d, _ := base64.RawURLEncoding.DecodeString(priv)
		n := significant(d)
		if n < 30 || found[n] {
			continue
		}
		found[n] = true
		rows = append(rows, row{version, "webpush.GenerateVAPIDKeys()", n, pub, priv})
	}
	clear(found)
	for len(found) < 3 {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			panic(err)
		}
		d := k.D.Bytes()
		n := len(d)
		if n < 30 || found[n] {
			continue
		}
		found[n] = true
		pub, err := k.PublicKey.Bytes()
		if err != nil {
			panic(err)
		}
		rows = append(rows,
			row{"go crypto/ecdsa", "base64.RawURLEncoding of k.D.Bytes() and k.PublicKey.Bytes()", n,
				base64.RawURLEncoding.EncodeToString(pub), base64.RawURLEncoding.EncodeToString(d)},
			row{"go crypto/ecdsa", "base64.URLEncoding (padded) of k.D.Bytes() and k.PublicKey.Bytes()", n,
				base64.URLEncoding.EncodeToString(pub), base64.URLEncoding.EncodeToString(d)})
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(rows); err != nil {
		panic(err)
	}
}
