package main

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
)

// devState is what `processor --dev` keeps in its data dir between runs, so
// that a second run picks up the first one's retry records as the same
// processor would: the HMAC key that signed them (a new key would
// dead-letter every one as bad_signature) and the simulators' addresses
// their endpoints name (new ports would make them endpoint_blocked).
type devState struct {
	HMACKey    string   `json:"hmac_key"`
	Simulators []string `json:"simulators"`
}

// devStateFile is the state's file in the data dir.
const devStateFile = "dev.json"

// loadDevState reads the data dir's dev state, or makes a fresh one with a
// new HMAC key when there is none or it cannot be read.
func loadDevState(dataDir string) devState {
	var s devState
	b, err := os.ReadFile(filepath.Join(dataDir, devStateFile))
	if err == nil && json.Unmarshal(b, &s) == nil && len(s.HMACKey) >= 64 {
		return s
	}
	k := make([]byte, 32)
	rand.Read(k)
	return devState{HMACKey: hex.EncodeToString(k)}
}

// save writes the state to the data dir, readable by its owner alone: it
// holds a key.
func (s devState) save(dataDir string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("--data-dir: %w", err)
	}
	return os.WriteFile(filepath.Join(dataDir, devStateFile), append(b, '\n'), 0o600)
}

// devSimAddrs are where the simulators of a first run listen when they can.
var devSimAddrs = []string{"127.0.0.1:8443", "127.0.0.1:8444"}

// listenSim listens for simulator i on the address it had last run, else on
// its default address, else on a free port (the last run's retries to the
// old one then end endpoint_blocked).
func (s *devState) listenSim(i int) (net.Listener, error) {
	addr := ""
	switch {
	case i < len(s.Simulators):
		addr = s.Simulators[i]
	case i < len(devSimAddrs):
		addr = devSimAddrs[i]
	}
	if addr != "" {
		if ln, err := net.Listen("tcp", addr); err == nil {
			s.setSim(i, addr)
			return ln, nil
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.setSim(i, ln.Addr().String())
	return ln, nil
}

func (s *devState) setSim(i int, addr string) {
	for len(s.Simulators) <= i {
		s.Simulators = append(s.Simulators, "")
	}
	s.Simulators[i] = addr
}
