package bus_test

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"

	"github.com/medgym/medgym/bus"
)

// testCA writes a CA and a server certificate for 127.0.0.1 under dir and
// returns the CA file and the server's TLS config.
func testCA(t *testing.T, dir string) (caFile string, srv *tls.Config) {
	t.Helper()
	caKey, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	caTmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "medgym test CA"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	ca, _ := x509.ParseCertificate(caDER)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(2), Subject: pkix.Name{CommonName: "nats"},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
	if err != nil {
		t.Fatal(err)
	}
	caFile = filepath.Join(dir, "ca.pem")
	if err := os.WriteFile(caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: caDER}), 0o600); err != nil {
		t.Fatal(err)
	}
	return caFile, &tls.Config{MinVersion: tls.VersionTLS12,
		Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}}
}

// TestConnectTLS (issue 13 item 10): a server that requires TLS is reached
// with --nats-ca; without the CA the certificate is refused. The URL's
// credentials never appear in the error.
func TestConnectTLS(t *testing.T) {
	caFile, tc := testCA(t, t.TempDir())
	ns, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: server.RANDOM_PORT, JetStream: true,
		StoreDir: t.TempDir(), NoSigs: true, NoLog: true, TLS: true, TLSConfig: tc, TLSTimeout: 5})
	if err != nil {
		t.Fatal(err)
	}
	go ns.Start()
	if !ns.ReadyForConnections(10 * time.Second) {
		t.Fatal("server not ready")
	}
	defer func() { ns.Shutdown(); ns.WaitForShutdown() }()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	log := slog.New(slog.DiscardHandler)
	addr := ns.Addr().String()

	conn, err := bus.Connect(ctx, "nats://"+addr, "tls-test", log, bus.WithTLS(bus.TLS{CAFile: caFile}))
	if err != nil {
		t.Fatalf("with the CA: %v", err)
	}
	if !conn.NC.TLSRequired() {
		t.Error("connected without TLS")
	}
	if st, err := conn.NC.TLSConnectionState(); err != nil || !st.HandshakeComplete {
		t.Errorf("TLS state: %v, %v", st.HandshakeComplete, err)
	}
	conn.Close()

	_, err = bus.Connect(ctx, "tls://alice:pw-s3cr3t@"+addr, "tls-test", log)
	if err == nil {
		t.Fatal("a certificate from an unknown CA was accepted")
	}
	if strings.Contains(err.Error(), "pw-s3cr3t") || !strings.Contains(err.Error(), "REDACTED@") {
		t.Errorf("error %q: want the URL shown without its password", err)
	}
	if _, err := bus.Connect(ctx, "nats://"+addr, "x", log, bus.WithTLS(bus.TLS{CertFile: caFile})); err == nil {
		t.Error("a client certificate without its key was accepted")
	}
}
