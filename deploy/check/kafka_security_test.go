package check

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"maps"
	"math/big"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"helm.sh/helm/v4/pkg/chart/common"
	"helm.sh/helm/v4/pkg/chart/common/util"
	corev1 "k8s.io/api/core/v1"
)

// checkKafkaSecurity: kafka.tls and kafka.sasl reach the processor and the
// topics Job alike — the same TIERPUSH_KAFKA_* variables, the same Secret
// volumes and mounts — and every file a variable names is the right key
// of the right Secret.
func checkKafkaSecurity(t *testing.T, r *rendered) {
	c := r.dep.Spec.Template.Spec.Containers[0]
	pod := r.dep.Spec.Template.Spec
	want := wantKafkaEnv(r)
	got := kafkaEnv(c)
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Deployment Kafka variables:\n got %+v\nwant %+v", got, want)
	}
	checkKafkaFiles(t, r, "Deployment", pod, c)
	if r.job == nil {
		return
	}
	jpod := r.job.Spec.Template.Spec
	jc := jpod.Containers[0]
	if jgot := kafkaEnv(jc); !reflect.DeepEqual(jgot, got) {
		t.Errorf("topics Job Kafka variables differ from the Deployment's:\n job %+v\n dep %+v", jgot, got)
	}
	if jv, dv := kafkaVolumes(jpod.Volumes), kafkaVolumes(pod.Volumes); !reflect.DeepEqual(jv, dv) {
		t.Errorf("topics Job Kafka volumes differ from the Deployment's:\n job %+v\n dep %+v", jv, dv)
	}
	if jm, dm := kafkaMounts(jc.VolumeMounts), kafkaMounts(c.VolumeMounts); !reflect.DeepEqual(jm, dm) {
		t.Errorf("topics Job Kafka mounts differ from the Deployment's:\n job %+v\n dep %+v", jm, dm)
	}
	checkKafkaFiles(t, r, "topics Job", jpod, jc)
}

// wantKafkaEnv is what kafka.tls and kafka.sasl ask for.
func wantKafkaEnv(r *rendered) []corev1.EnvVar {
	var want []corev1.EnvVar
	add := func(name, value string) { want = append(want, corev1.EnvVar{Name: name, Value: value}) }
	if r.valBool("kafka.tls.enabled") {
		add("TIERPUSH_KAFKA_TLS", "true")
		secret := r.valString("kafka.tls.existingSecret")
		if secret != "" && r.valString("kafka.tls.existingSecretKeys.ca") != "" {
			add("TIERPUSH_KAFKA_TLS_CA", "/etc/tierpush-kafka/tls/ca.crt")
		}
		if r.valBool("kafka.tls.clientCert") {
			add("TIERPUSH_KAFKA_TLS_CERT", "/etc/tierpush-kafka/tls/tls.crt")
			add("TIERPUSH_KAFKA_TLS_KEY", "/etc/tierpush-kafka/tls/tls.key")
		}
		if sn := r.valString("kafka.tls.serverName"); sn != "" {
			add("TIERPUSH_KAFKA_TLS_SERVER_NAME", sn)
		}
	}
	if m := r.valString("kafka.sasl.mechanism"); m != "" {
		add("TIERPUSH_KAFKA_SASL_MECHANISM", m)
		if u := r.valString("kafka.sasl.username"); u != "" {
			add("TIERPUSH_KAFKA_SASL_USER", u)
		} else {
			want = append(want, corev1.EnvVar{Name: "TIERPUSH_KAFKA_SASL_USER", ValueFrom: &corev1.EnvVarSource{
				SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: r.valString("kafka.sasl.existingSecret")},
					Key:                  r.valString("kafka.sasl.existingSecretKeys.username"),
				}}})
		}
		add("TIERPUSH_KAFKA_SASL_PASSWORD_FILE", "/etc/tierpush-kafka/sasl/password")
	}
	return want
}

func kafkaEnv(c corev1.Container) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, e := range c.Env {
		if strings.HasPrefix(e.Name, "TIERPUSH_KAFKA_") {
			out = append(out, e)
		}
	}
	return out
}

func kafkaVolumes(vs []corev1.Volume) []corev1.Volume {
	var out []corev1.Volume
	for _, v := range vs {
		if strings.HasPrefix(v.Name, "kafka-") {
			out = append(out, v)
		}
	}
	return out
}

func kafkaMounts(ms []corev1.VolumeMount) []corev1.VolumeMount {
	var out []corev1.VolumeMount
	for _, m := range ms {
		if strings.HasPrefix(m.Name, "kafka-") {
			out = append(out, m)
		}
	}
	return out
}

// checkKafkaFiles: each file variable names a file of a read-only mount
// of the Secret it belongs to, projected from the configured key.
func checkKafkaFiles(t *testing.T, r *rendered, what string, pod corev1.PodSpec, c corev1.Container) {
	t.Helper()
	files := map[string]struct{ secret, key string }{
		"TIERPUSH_KAFKA_TLS_CA":             {"kafka.tls.existingSecret", "kafka.tls.existingSecretKeys.ca"},
		"TIERPUSH_KAFKA_TLS_CERT":           {"kafka.tls.existingSecret", "kafka.tls.existingSecretKeys.cert"},
		"TIERPUSH_KAFKA_TLS_KEY":            {"kafka.tls.existingSecret", "kafka.tls.existingSecretKeys.key"},
		"TIERPUSH_KAFKA_SASL_PASSWORD_FILE": {"kafka.sasl.existingSecret", "kafka.sasl.existingSecretKeys.password"},
	}
	for env, src := range files {
		file := envValue(c, env)
		if file == "" {
			continue
		}
		dir, base := path.Split(file)
		var mount *corev1.VolumeMount
		for i := range c.VolumeMounts {
			if c.VolumeMounts[i].MountPath == strings.TrimSuffix(dir, "/") {
				mount = &c.VolumeMounts[i]
			}
		}
		if mount == nil || !mount.ReadOnly {
			t.Errorf("%s: %s=%s is in no read-only mount", what, env, file)
			continue
		}
		var vol *corev1.Volume
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == mount.Name {
				vol = &pod.Volumes[i]
			}
		}
		if vol == nil || vol.Secret == nil || vol.Secret.SecretName != r.valString(src.secret) {
			t.Errorf("%s: %s is not from Secret %s (%s): %+v", what, env, r.valString(src.secret), src.secret, vol)
			continue
		}
		found := false
		for _, it := range vol.Secret.Items {
			if it.Path == base && it.Key == r.valString(src.key) {
				found = true
			}
		}
		if !found {
			t.Errorf("%s: %s file %s is not key %s (%s) of Secret %s: %+v", what, env, base, r.valString(src.key), src.key, vol.Secret.SecretName, vol.Secret.Items)
		}
	}
}

// containerEnv is what container c sees at run time, with test values for
// what comes from Secrets outside the chart and test files in place of
// every Secret volume it mounts item by item (their paths rewritten).
func containerEnv(t *testing.T, r *rendered, pod corev1.PodSpec, c corev1.Container) map[string]string {
	t.Helper()
	testKeys := testRunEnv()
	testKeys["TIERPUSH_KAFKA_SASL_USER"] = "tierpush"
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom == nil:
			env[e.Name] = e.Value
		case e.ValueFrom.SecretKeyRef != nil:
			v := ""
			if r.secret != nil && e.ValueFrom.SecretKeyRef.Name == r.secret.Name {
				v = string(r.secret.Data[e.ValueFrom.SecretKeyRef.Key])
			}
			if v == "" {
				v = testKeys[e.Name]
			}
			if v != "" {
				env[e.Name] = v
			}
		}
	}
	for _, m := range c.VolumeMounts {
		var vol *corev1.Volume
		for i := range pod.Volumes {
			if pod.Volumes[i].Name == m.Name {
				vol = &pod.Volumes[i]
			}
		}
		if vol == nil || vol.Secret == nil || len(vol.Secret.Items) == 0 {
			continue
		}
		dir := t.TempDir()
		for _, it := range vol.Secret.Items {
			if err := os.WriteFile(filepath.Join(dir, it.Path), []byte(testSecretFile(it.Path)), 0o600); err != nil {
				t.Fatal(err)
			}
		}
		for k, v := range env {
			if rest, ok := strings.CutPrefix(v, m.MountPath+"/"); ok {
				env[k] = filepath.Join(dir, rest)
			}
		}
	}
	return env
}

// testSecretFile is test content for a projected Secret file, by name.
func testSecretFile(name string) string {
	p := testPKI()
	switch name {
	case "ca.crt":
		return p.ca
	case "tls.crt":
		return p.cert
	case "tls.key":
		return p.key
	case "vapid-keys.yaml":
		return testVAPIDKeysFile
	}
	return "test-secret-value\n"
}

// testPKI is a CA and a client certificate it signed, in PEM.
var testPKI = sync.OnceValue(func() struct{ ca, cert, key string } {
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "tierpush test CA"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		panic(err)
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		panic(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "tierpush"},
		NotBefore: now.Add(-time.Hour), NotAfter: now.Add(24 * time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, caTmpl, &key.PublicKey, caKey)
	if err != nil {
		panic(err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		panic(err)
	}
	enc := func(typ string, b []byte) string { return string(pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: b})) }
	return struct{ ca, cert, key string }{enc("CERTIFICATE", caDER), enc("CERTIFICATE", der), enc("PRIVATE KEY", keyDER)}
})

// TestChartKafkaSecurity renders TLS and SASL combinations and checks the
// Deployment and the topics Job carry each the same way, and the binary
// accepts them; and that combinations that cannot work fail at template
// time naming the value.
func TestChartKafkaSecurity(t *testing.T) {
	ch := loadChart(t)
	ok := map[string]string{
		"tls with system roots": "kafka: {tls: {enabled: true}}",
		"tls with own CA":       "kafka: {tls: {enabled: true, existingSecret: kafka-ca, serverName: kafka.internal}}",
		"mutual tls":            "kafka: {tls: {enabled: true, existingSecret: kafka-tls, clientCert: true, existingSecretKeys: {ca: ca.pem, cert: user.crt, key: user.key}}}",
		"mutual tls without CA": "kafka: {tls: {enabled: true, existingSecret: kafka-tls, clientCert: true, existingSecretKeys: {ca: ''}}}",
		"scram without tls":     "kafka: {sasl: {mechanism: SCRAM-SHA-256, existingSecret: kafka-user}}",
		"plain over tls":        "kafka: {tls: {enabled: true}, sasl: {mechanism: PLAIN, existingSecret: kafka-user, existingSecretKeys: {username: user, password: pass}}}",
		"mtls and scram-512":    "kafka: {tls: {enabled: true, existingSecret: kafka-tls, clientCert: true}, sasl: {mechanism: SCRAM-SHA-512, existingSecret: kafka-user, username: tierpush}}",
	}
	for name, values := range ok {
		// No comma in a name: the processor splits TIERPUSH_* values at
		// commas, and the test files live under the test's name.
		t.Run(name, func(t *testing.T) {
			r := renderAndDecode(t, ch, valueSet{name: name, inline: minimalValues + values})
			if r.job == nil {
				t.Fatal("no topics Job")
			}
			checkKafkaSecurity(t, r)
			checkTopicsJob(t, r)
			checkProcessorConfig(t, r)
			checkVolumes(t, "Deployment", r.dep.Spec.Template.Spec)
			if len(wantKafkaEnv(r)) == 0 {
				t.Error("these values ask for nothing")
			}
		})
	}

	bad := []struct{ values, wantErr string }{
		{"kafka: {tls: {existingSecret: kafka-ca}}", "kafka.tls.enabled"},
		{"kafka: {tls: {enabled: true, clientCert: true}}", "kafka.tls.existingSecret"},
		{"kafka: {sasl: {mechanism: SCRAM-SHA-512}}", "kafka.sasl.existingSecret"},
		{"kafka: {sasl: {existingSecret: kafka-user}}", "kafka.sasl.mechanism"},
		{"kafka: {sasl: {mechanism: PLAIN, existingSecret: kafka-user}}", "PLAIN"},
		{"kafka: {sasl: {mechanism: GSSAPI, existingSecret: kafka-user}}", "mechanism"},
		{"kafka: {tls: {enabled: yes-please}}", "enabled"},
	}
	base, err := common.ReadValues([]byte(minimalValues))
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range bad {
		vals, err := common.ReadValues([]byte(tt.values))
		if err != nil {
			t.Fatal(err)
		}
		_, _, err = render(ch, util.MergeTables(vals, base))
		if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: %v, want an error naming %s", tt.values, err, tt.wantErr)
		}
	}
}

// The binary checks the files the chart mounts: a CA that is no
// certificate or a password file that is not there stops it, naming the
// flag; a readable password file passes.
func TestKafkaFilesAreChecked(t *testing.T) {
	dir := t.TempDir()
	notPEM := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(notPEM, []byte("not a certificate"), 0o600); err != nil {
		t.Fatal(err)
	}
	env := testRunEnv()
	env["TIERPUSH_BROKERS"] = "kafka:9093"
	e := maps.Clone(env)
	e["TIERPUSH_KAFKA_TLS_CA"] = notPEM
	if err := acceptedErr([]string{"run"}, e); err == nil || !strings.Contains(err.Error(), "--kafka-tls-ca") {
		t.Errorf("a CA file without a certificate: %v, want a complaint naming --kafka-tls-ca", err)
	}
	e = maps.Clone(env)
	e["TIERPUSH_KAFKA_SASL_MECHANISM"] = "SCRAM-SHA-512"
	e["TIERPUSH_KAFKA_SASL_USER"] = "tierpush"
	e["TIERPUSH_KAFKA_SASL_PASSWORD_FILE"] = filepath.Join(dir, "missing")
	if err := acceptedErr([]string{"run"}, e); err == nil || !strings.Contains(err.Error(), "--kafka-sasl-password-file") {
		t.Errorf("a missing SASL password file: %v, want a complaint naming --kafka-sasl-password-file", err)
	}
	e["TIERPUSH_KAFKA_SASL_PASSWORD_FILE"] = notPEM
	if err := acceptedErr([]string{"run"}, e); err != nil {
		t.Errorf("a readable password file: %v", err)
	}
}
