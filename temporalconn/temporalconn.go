// Package temporalconn holds the options every retrain command uses to reach
// a Temporal cluster: address, namespace and TLS (or an API key), from flags
// with environment fallbacks.
package temporalconn

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/spf13/pflag"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	sdklog "go.temporal.io/sdk/log"
)

// Options say where the Temporal frontend is and how to authenticate.
type Options struct {
	Address       string
	Namespace     string
	TLSCert       string // client certificate (mTLS)
	TLSKey        string
	TLSCA         string // CA bundle for the server certificate
	TLSServerName string
	TLS           bool   // TLS with the system roots, no client certificate
	APIKey        string // Temporal Cloud API key; implies TLS
	// Interceptors go into every client dialled with these options (and
	// the workers made from it): tracing, when a command turns it on.
	Interceptors []interceptor.ClientInterceptor
}

// AddFlags registers the connection flags. Defaults come from RETRAIN_*
// environment variables so deployed workers need no flags at all.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Address, "address", envOr("RETRAIN_TEMPORAL_ADDRESS", "localhost:7233"), "Temporal frontend host:port (env RETRAIN_TEMPORAL_ADDRESS)")
	fs.StringVar(&o.Namespace, "namespace", envOr("RETRAIN_NAMESPACE", "default"), "Temporal namespace (env RETRAIN_NAMESPACE)")
	fs.StringVar(&o.TLSCert, "tls-cert", os.Getenv("RETRAIN_TLS_CERT"), "client certificate file for mTLS (env RETRAIN_TLS_CERT)")
	fs.StringVar(&o.TLSKey, "tls-key", os.Getenv("RETRAIN_TLS_KEY"), "client key file for mTLS (env RETRAIN_TLS_KEY)")
	fs.StringVar(&o.TLSCA, "tls-ca", os.Getenv("RETRAIN_TLS_CA"), "CA bundle for the server certificate (env RETRAIN_TLS_CA)")
	fs.StringVar(&o.TLSServerName, "tls-server-name", os.Getenv("RETRAIN_TLS_SERVER_NAME"), "server name to verify (env RETRAIN_TLS_SERVER_NAME)")
	fs.BoolVar(&o.TLS, "tls", os.Getenv("RETRAIN_TLS") == "true", "use TLS with the system roots (env RETRAIN_TLS=true)")
	fs.StringVar(&o.APIKey, "api-key", "", "API key (prefer env RETRAIN_API_KEY: flags show up in process lists)")
}

func envOr(key, def string) string {
	if v := os.Getenv(key); v != "" {
		return v
	}
	return def
}

// ClientOptions builds the SDK client options.
func (o Options) ClientOptions(logger *slog.Logger) (client.Options, error) {
	opts := client.Options{HostPort: o.Address, Namespace: o.Namespace, Interceptors: o.Interceptors}
	if logger != nil {
		opts.Logger = sdklog.NewStructuredLogger(logger)
	}
	tlsCfg, err := o.tlsConfig()
	if err != nil {
		return client.Options{}, err
	}
	opts.ConnectionOptions.TLS = tlsCfg
	apiKey := o.APIKey
	if apiKey == "" {
		apiKey = os.Getenv("RETRAIN_API_KEY")
	}
	if apiKey != "" {
		opts.Credentials = client.NewAPIKeyStaticCredentials(apiKey)
		if opts.ConnectionOptions.TLS == nil {
			opts.ConnectionOptions.TLS = &tls.Config{}
		}
	}
	return opts, nil
}

func (o Options) tlsConfig() (*tls.Config, error) {
	if o.TLSCert == "" && o.TLSKey == "" && o.TLSCA == "" && !o.TLS {
		return nil, nil
	}
	cfg := &tls.Config{ServerName: o.TLSServerName, MinVersion: tls.VersionTLS12}
	if (o.TLSCert == "") != (o.TLSKey == "") {
		return nil, errors.New("--tls-cert and --tls-key go together")
	}
	if o.TLSCert != "" {
		cert, err := tls.LoadX509KeyPair(o.TLSCert, o.TLSKey)
		if err != nil {
			return nil, fmt.Errorf("load TLS client certificate: %w", err)
		}
		cfg.Certificates = []tls.Certificate{cert}
	}
	if o.TLSCA != "" {
		pem, err := os.ReadFile(o.TLSCA)
		if err != nil {
			return nil, fmt.Errorf("read TLS CA: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("TLS CA %s holds no PEM certificate", o.TLSCA)
		}
		cfg.RootCAs = pool
	}
	return cfg, nil
}

// Dial connects to Temporal and checks the namespace exists, so a wrong
// address or namespace fails here with a clear message instead of at first
// use. A caller not allowed to describe the namespace is let through: its
// first real call will say what is wrong.
func (o Options) Dial(ctx context.Context, logger *slog.Logger) (client.Client, error) {
	opts, err := o.ClientOptions(logger)
	if err != nil {
		return nil, err
	}
	c, err := client.DialContext(ctx, opts)
	if err != nil {
		return nil, fmt.Errorf("connect to Temporal at %s (namespace %s): %w", o.Address, o.Namespace, err)
	}
	_, err = c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: o.Namespace})
	var notFound *serviceerror.NamespaceNotFound
	if errors.As(err, &notFound) {
		c.Close()
		return nil, fmt.Errorf("Temporal at %s has no namespace %q: create it, or pass --namespace", o.Address, o.Namespace)
	}
	return c, nil
}
