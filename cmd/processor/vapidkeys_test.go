package main

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	webpush "github.com/SherClockHolmes/webpush-go"
)

type keyPair struct{ priv, pub string }

func newKeyPair(t *testing.T) keyPair {
	t.Helper()
	priv, pub, err := webpush.GenerateVAPIDKeys()
	if err != nil {
		t.Fatal(err)
	}
	return keyPair{priv: priv, pub: pub}
}

// identityYAML is one app's entry of a keys file.
func identityYAML(app string, k keyPair, subject string) string {
	return fmt.Sprintf("%s:\n  public_key: %s\n  private_key: %s\n  subject: %s\n", app, k.pub, k.priv, subject)
}

// keysPos is how a keys file error starts: line:column (the line alone
// for a YAML syntax error).
var keysPos = regexp.MustCompile(`^\d+(:\d+)?: `)

// TestParseVAPIDKeys: a keys file is read strictly; each refusal says
// where, names the app and the field, and no error holds a key.
func TestParseVAPIDKeys(t *testing.T) {
	shop, news, other := newKeyPair(t), newKeyPair(t), newKeyPair(t)
	raw := func(k string) []byte { b, _ := base64.RawURLEncoding.DecodeString(k); return b }
	good := identityYAML("shop", shop, "mailto:push@shop.example") + identityYAML("news", news, `"https://news.example"`)
	entry := func(pub, priv, subject string) string {
		return fmt.Sprintf("shop:\n  public_key: %s\n  private_key: %s\n  subject: %s\n", pub, priv, subject)
	}
	tests := []struct {
		name string
		yaml string
		want string // error prefix; "" for valid
	}{
		{"two apps", good, ""},
		{"quoted keys, padded base64url", entry(`"`+base64.URLEncoding.EncodeToString(raw(shop.pub))+`"`, `'`+shop.priv+`'`, "mailto:push@shop.example"), ""},
		{"rotation pair", identityYAML("shop", shop, "mailto:push@shop.example") + identityYAML("shop-2027", news, "mailto:push@shop.example"), ""},

		{"bad base64", entry(shop.pub, shop.priv[:10]+"*"+shop.priv[11:], "mailto:push@shop.example"), "shop.private_key: not base64url"},
		{"public key bad base64", entry(shop.pub[:10]+"*"+shop.pub[11:], shop.priv, "mailto:push@shop.example"), "shop.public_key: not base64url"},
		{"a key read as a YAML alias", entry("*"+shop.pub[1:], shop.priv, "mailto:push@shop.example"), "not valid YAML"},
		{"a key read as a YAML tag", entry(shop.pub, "!"+shop.priv[1:]+" x", "mailto:push@shop.example"), "shop.private_key: not base64url"},
		{"private key cut short", entry(shop.pub, shop.priv[:40], "mailto:push@shop.example"), "shop.private_key: does not match shop.public_key"},
		{"private key too long", entry(shop.pub, shop.priv+"AAAA", "mailto:push@shop.example"), "shop.private_key: 35 bytes"},
		{"public key wrong length", entry(shop.pub[:60], shop.priv, "mailto:push@shop.example"), "shop.public_key: 45 bytes"},
		{"public key not the private key's", entry(shop.pub, other.priv, "mailto:push@shop.example"), "shop.private_key: does not match shop.public_key"},
		{"missing subject", fmt.Sprintf("shop:\n  public_key: %s\n  private_key: %s\n", shop.pub, shop.priv), "shop.subject: missing"},
		{"empty subject", entry(shop.pub, shop.priv, `""`), "shop.subject: missing"},
		{"subject a bare address", entry(shop.pub, shop.priv, "push@shop.example"), "shop.subject: want mailto:address or an https URL"},
		{"subject http", entry(shop.pub, shop.priv, "http://shop.example"), "shop.subject: want mailto:address or an https URL"},
		{"missing private key", fmt.Sprintf("shop:\n  public_key: %s\n  subject: mailto:a@b.example\n", shop.pub), "shop.private_key: missing"},
		{"unknown field", entry(shop.pub, shop.priv, "mailto:push@shop.example") + "  publickey: x\n", `shop: unknown field "publickey"`},
		{"field twice", entry(shop.pub, shop.priv, "mailto:push@shop.example") + "  private_key: " + other.priv + "\n", "shop.private_key: given twice"},
		{"app twice", good + identityYAML("shop", other, "mailto:push@shop.example"), `"shop": given twice`},
		{"field not a string", entry(shop.pub, shop.priv, "[mailto:push@shop.example]"), "shop.subject: want a string"},
		{"app not a mapping", "shop: " + shop.priv + "\n", "shop: want a mapping"},
		{"bad app name", identityYAML("shop/eu", shop, "mailto:push@shop.example"), `app name "shop/eu": want letters`},
		{"app named default", identityYAML("default", shop, "mailto:push@shop.example"), `app name "default": names the default identity`},
		{"numeric app name", identityYAML("2027", shop, "mailto:push@shop.example"), `app name "2027": want a string`},
		{"a key where a name belongs", shop.priv + ":\n  public_key: x\n", "an app name is shaped like a key"},
		{"a key where a field belongs", "shop:\n  " + shop.priv + ": x\n", "shop: unknown field (shaped like a key)"},
		{"not a mapping", "- " + shop.priv + "\n", "want a mapping"},
		{"not YAML", "shop:\n  public_key: [" + shop.pub + "\n", "not valid YAML"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			apps, err := parseVAPIDKeys([]byte(tt.yaml))
			if tt.want == "" {
				if err != nil {
					t.Fatalf("parseVAPIDKeys: %v", err)
				}
				for name, v := range apps {
					if v.PublicKey == "" || v.PrivateKey == "" || v.Subject == "" {
						t.Errorf("app %s: %+v incomplete", name, v)
					}
				}
				return
			}
			if err == nil || !keysPos.MatchString(err.Error()) || !strings.HasPrefix(keysPos.ReplaceAllString(err.Error(), ""), tt.want) {
				t.Fatalf("parseVAPIDKeys() = %v, want line:column: then %q", err, tt.want)
			}
			for _, k := range []keyPair{shop, news, other} {
				for _, secret := range []string{k.priv, k.priv[:20], k.pub} {
					if strings.Contains(err.Error(), secret) {
						t.Errorf("error %q holds a key", err)
					}
				}
			}
		})
	}
	apps, err := parseVAPIDKeys([]byte(good))
	if err != nil {
		t.Fatal(err)
	}
	if len(apps) != 2 || apps["shop"].PrivateKey != shop.priv || apps["news"].Subject != "https://news.example" {
		t.Errorf("apps %+v", apps)
	}
}

// TestVAPIDKeysExitCodes: the processor refuses a bad keys file at start
// with exit 2, naming the flag, the app and the field and printing no key;
// a keys file alone is enough, without a default identity.
func TestVAPIDKeysExitCodes(t *testing.T) {
	dir := t.TempDir()
	shop, other := newKeyPair(t), newKeyPair(t)
	write := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good := write("good.yaml", identityYAML("shop", shop, "mailto:push@shop.example"))
	mismatch := write("mismatch.yaml", fmt.Sprintf("shop:\n  public_key: %s\n  private_key: %s\n  subject: mailto:push@shop.example\n", shop.pub, other.priv))
	empty := write("empty.yaml", "# no apps yet\n{}\n")
	hmac := strings.Repeat("k", 32)
	tests := []struct {
		name string
		args []string
		env  []string
		code int
		want string
	}{
		{"key not the pair's", []string{"--brokers", "127.0.0.1:1", "--hmac-key", hmac, "--vapid-keys", mismatch}, nil, 2, "--vapid-keys " + mismatch + ":1:1: shop.private_key: does not match shop.public_key"},
		{"from the env var", []string{"--brokers", "127.0.0.1:1", "--hmac-key", hmac}, []string{"TIERPUSH_VAPID_KEYS=" + mismatch}, 2, ":1:1: shop.private_key"},
		{"missing file", []string{"--brokers", "127.0.0.1:1", "--hmac-key", hmac, "--vapid-keys", filepath.Join(dir, "nope.yaml")}, nil, 2, "--vapid-keys"},
		{"no apps", []string{"--brokers", "127.0.0.1:1", "--hmac-key", hmac, "--vapid-keys", empty}, nil, 2, "names no app"},
		{"a partial default beside the file", []string{"--brokers", "127.0.0.1:1", "--hmac-key", hmac, "--vapid-keys", good, "--vapid-subject", "mailto:ops@example.com"}, nil, 2, "--vapid-public-key: missing"},
		{"neither file nor default", []string{"--brokers", "127.0.0.1:1", "--hmac-key", hmac}, nil, 2, "--vapid-public-key"},
		{"help names it", []string{"run", "--help"}, nil, 0, "TIERPUSH_VAPID_KEYS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cmd := exec.Command(binary, tt.args...)
			cmd.Env = append(os.Environ(), tt.env...)
			out, err := cmd.CombinedOutput()
			code := 0
			if ee, ok := err.(*exec.ExitError); ok {
				code = ee.ExitCode()
			}
			if code != tt.code || !strings.Contains(string(out), tt.want) {
				t.Errorf("exit %d, want %d naming %q; output:\n%s", code, tt.code, tt.want, out)
			}
			for _, k := range []keyPair{shop, other} {
				if strings.Contains(string(out), k.priv) {
					t.Errorf("output holds a private key:\n%s", out)
				}
			}
		})
	}
}

// TestConfigVAPIDIdentities: the keys file alone is a valid configuration
// (no default identity), and so is the default alone or both.
func TestConfigVAPIDIdentities(t *testing.T) {
	for _, k := range []string{"VAPID_PUBLIC_KEY", "VAPID_PRIVATE_KEY", "VAPID_SUBJECT"} {
		t.Setenv(k, "")
	}
	shop, def := newKeyPair(t), newKeyPair(t)
	file := filepath.Join(t.TempDir(), "keys.yaml")
	if err := os.WriteFile(file, []byte(identityYAML("shop", shop, "mailto:push@shop.example")), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name        string
		keys        string
		withDefault bool
		wantDefault bool
		wantApps    int
	}{
		{"keys file only", file, false, false, 1},
		{"default only", "", true, true, 0},
		{"both", file, true, true, 1},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := DefaultConfig()
			c.Brokers = listFlag{"127.0.0.1:1"}
			c.HMACKey = strings.Repeat("k", 32)
			c.VAPIDKeys = tt.keys
			if tt.withDefault {
				c.VAPIDPublicKey, c.VAPIDPrivateKey, c.VAPIDSubject = def.pub, def.priv, "mailto:ops@example.com"
			}
			if err := c.finish(); err != nil {
				t.Fatalf("finish: %v", err)
			}
			if c.hasDefaultVAPID() != tt.wantDefault || len(c.apps) != tt.wantApps {
				t.Errorf("default %v, %d apps; want %v, %d", c.hasDefaultVAPID(), len(c.apps), tt.wantDefault, tt.wantApps)
			}
		})
	}
}

// toolKey is a key pair from internal/dispatch/testdata/vapid, as a tool
// wrote it.
type toolKey struct {
	How         string `json:"how"`
	ScalarBytes int    `json:"scalar_bytes"`
	PublicKey   string `json:"public_key"`
	PrivateKey  string `json:"private_key"`
}

// toolKeys reads the key pairs of one generator's output.
func toolKeys(t *testing.T, file string) []toolKey {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "internal", "dispatch", "testdata", "vapid", file))
	if err != nil {
		t.Fatal(err)
	}
	var keys []toolKey
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatal(err)
	}
	return keys
}

// TestVAPIDKeysAsToolsWriteThem: key pairs as Node, webpush-go, crypto/ecdsa
// and OpenSSL write them — 31- and 30-byte scalars, padded or not,
// base64url or standard base64 — are taken by the flags, the VAPID_*
// variables and the --vapid-keys file alike.
func TestVAPIDKeysAsToolsWriteThem(t *testing.T) {
	for _, k := range []string{"VAPID_PUBLIC_KEY", "VAPID_PRIVATE_KEY", "VAPID_SUBJECT"} {
		t.Setenv(k, "")
	}
	var keys []toolKey
	for _, f := range []string{"node.json", "go.json", "openssl.json"} {
		keys = append(keys, toolKeys(t, f)...)
	}
	hmac := strings.Repeat("k", 32)
	for _, k := range keys {
		t.Run(fmt.Sprintf("%s %d", k.How, k.ScalarBytes), func(t *testing.T) {
			file := filepath.Join(t.TempDir(), "keys.yaml")
			entry := fmt.Sprintf("shop:\n  public_key: %q\n  private_key: %q\n  subject: mailto:push@shop.example\n", k.PublicKey, k.PrivateKey)
			if err := os.WriteFile(file, []byte(entry), 0o600); err != nil {
				t.Fatal(err)
			}
			for name, args := range map[string][]string{
				"flags":      {"--vapid-public-key", k.PublicKey, "--vapid-private-key", k.PrivateKey, "--vapid-subject", "ops@example.com"},
				"keys file":  {"--vapid-keys", file},
				"file+flags": {"--vapid-keys", file, "--vapid-public-key", k.PublicKey, "--vapid-private-key", k.PrivateKey, "--vapid-subject", "mailto:ops@example.com"},
			} {
				c := DefaultConfig()
				fs := newFlagSet("processor run", io.Discard)
				c.register(fs)
				if err := parseFlags(fs, append([]string{"--brokers", "127.0.0.1:1", "--hmac-key", hmac}, args...)); err != nil {
					t.Fatalf("%s: %v", name, err)
				}
				if err := c.finish(); err != nil {
					t.Errorf("%s: %v", name, err)
				}
			}
		})
	}
	// The VAPID_* variables, as a Secret would give them.
	k := keys[len(keys)-1]
	t.Setenv("VAPID_PUBLIC_KEY", k.PublicKey)
	t.Setenv("VAPID_PRIVATE_KEY", k.PrivateKey)
	t.Setenv("VAPID_SUBJECT", "mailto:ops@example.com")
	c := DefaultConfig()
	c.Brokers, c.HMACKey = listFlag{"127.0.0.1:1"}, hmac
	if err := c.finish(); err != nil {
		t.Errorf("VAPID_* variables: %v", err)
	}
}

// TestVAPIDKeyRefusalsExit2: a private key out of range or not the public
// key's stops the processor with exit 2 naming the flag, or the file and
// the app, and the reason.
func TestVAPIDKeyRefusalsExit2(t *testing.T) {
	keys := toolKeys(t, "node.json")
	a, b := keys[0], keys[2]
	enc := base64.RawURLEncoding.EncodeToString
	ff := enc(bytes.Repeat([]byte{0xff}, 32))
	dir := t.TempDir()
	files := 0
	keysFile := func(pub, priv string) string {
		files++
		p := filepath.Join(dir, fmt.Sprintf("keys-%d.yaml", files))
		content := fmt.Sprintf("news:\n  public_key: %q\n  private_key: %q\n  subject: https://news.example\n", pub, priv)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	base := []string{"--brokers", "127.0.0.1:1", "--hmac-key", strings.Repeat("k", 32)}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"flag, out of range", []string{"--vapid-public-key", a.PublicKey, "--vapid-private-key", ff, "--vapid-subject", "mailto:ops@example.com"}, "--vapid-private-key: out of range for P-256"},
		{"flag, not the pair's", []string{"--vapid-public-key", a.PublicKey, "--vapid-private-key", b.PrivateKey, "--vapid-subject", "mailto:ops@example.com"}, "--vapid-private-key: does not match --vapid-public-key"},
		{"file, out of range", []string{"--vapid-keys", keysFile(a.PublicKey, ff)}, ":1:1: news.private_key: out of range for P-256"},
		{"file, not the pair's", []string{"--vapid-keys", keysFile(b.PublicKey, a.PrivateKey)}, ":1:1: news.private_key: does not match news.public_key"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runTool(t, "", []string{"VAPID_PUBLIC_KEY=", "VAPID_PRIVATE_KEY=", "VAPID_SUBJECT="}, append(base, tt.args...)...)
			if code != 2 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, want 2 naming %q; stderr:\n%s", code, tt.want, stderr)
			}
			for _, k := range []string{a.PrivateKey, b.PrivateKey, ff} {
				if strings.Contains(stderr, k) {
					t.Errorf("stderr holds a private key:\n%s", stderr)
				}
			}
		})
	}
}
