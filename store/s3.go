package store

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"sort"
	"strings"

	"github.com/minio/minio-go/v7"
	"github.com/minio/minio-go/v7/pkg/credentials"
)

// partSize is the multipart part size: objects larger than this are uploaded
// in parts (minio-go's minimum, 16 MiB).
const partSize = 16 << 20

// s3Backend stores objects in bucket under prefix.
type s3Backend struct {
	client   *minio.Client
	endpoint string // as given, for messages
	bucket   string
	prefix   string // "" or ending in "/"
}

// parseS3URL splits s3://bucket/prefix.
func parseS3URL(raw string) (bucket, prefix string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", fmt.Errorf("parse store url %q: %w", raw, err)
	}
	if u.Host == "" {
		return "", "", fmt.Errorf("store url %q: no bucket (want s3://bucket/prefix)", raw)
	}
	prefix = strings.Trim(u.Path, "/")
	if prefix != "" {
		prefix += "/"
	}
	return u.Host, prefix, nil
}

// splitEndpoint accepts "host:port" or "http(s)://host:port" and returns
// the host:port and whether to use TLS.
func splitEndpoint(ep string, useSSL bool) (string, bool, error) {
	if !strings.Contains(ep, "://") {
		return strings.TrimSuffix(ep, "/"), useSSL, nil
	}
	u, err := url.Parse(ep)
	if err != nil {
		return "", false, fmt.Errorf("parse endpoint %q: %w", ep, err)
	}
	switch u.Scheme {
	case "http":
		return u.Host, false, nil
	case "https":
		return u.Host, true, nil
	}
	return "", false, fmt.Errorf("endpoint %q: scheme %q (want http or https)", ep, u.Scheme)
}

func newS3Backend(ctx context.Context, raw string, opt Options) (*s3Backend, error) {
	bucket, prefix, err := parseS3URL(raw)
	if err != nil {
		return nil, err
	}
	if opt.Endpoint == "" {
		return nil, fmt.Errorf("open store %s: no s3 endpoint: set --endpoint or AWS_ENDPOINT_URL (for a local MinIO: scripts/minio.sh start)", raw)
	}
	host, secure, err := splitEndpoint(opt.Endpoint, opt.UseSSL)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", raw, err)
	}
	mo := &minio.Options{
		Creds:      credentials.NewStaticV4(opt.AccessKey, opt.SecretKey, ""),
		Secure:     secure,
		Region:     opt.Region,
		MaxRetries: opt.MaxRetries,
	}
	if opt.CAFile != "" {
		if mo.Transport, err = caTransport(opt.CAFile); err != nil {
			return nil, fmt.Errorf("open store %s: %w", raw, err)
		}
	}
	client, err := minio.New(host, mo)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", raw, err)
	}
	b := &s3Backend{client: client, endpoint: opt.Endpoint, bucket: bucket, prefix: prefix}
	exists, err := client.BucketExists(ctx, bucket)
	if err != nil {
		return nil, fmt.Errorf("open store %s: %w", raw, b.explain(err))
	}
	if !exists {
		if err := client.MakeBucket(ctx, bucket, minio.MakeBucketOptions{Region: opt.Region}); err != nil {
			// Another process may have created it in between.
			if minio.ToErrorResponse(err).Code != "BucketAlreadyOwnedByYou" {
				return nil, fmt.Errorf("open store %s: create bucket: %w", raw, b.explain(err))
			}
		}
	}
	return b, nil
}

// explain turns the errors people meet most often into one actionable
// message that names the endpoint.
func (b *s3Backend) explain(err error) error {
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	resp := minio.ToErrorResponse(err)
	switch resp.Code {
	case "AccessDenied", "InvalidAccessKeyId", "SignatureDoesNotMatch":
		return fmt.Errorf("s3 endpoint %s refused the credentials (%s): check AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY: %w",
			b.endpoint, resp.Code, err)
	}
	if minio.IsNetworkOrHostDown(err, true) || resp.Code == "" {
		return fmt.Errorf("s3 endpoint %s is unreachable: is the server running (local MinIO: scripts/minio.sh start) and is AWS_ENDPOINT_URL right?: %w",
			b.endpoint, err)
	}
	return fmt.Errorf("s3 endpoint %s: %w", b.endpoint, err)
}

func (b *s3Backend) locate(key string) string { return "s3://" + b.bucket + "/" + b.prefix + key }

func putOptions() minio.PutObjectOptions {
	return minio.PutObjectOptions{
		ContentType: "application/octet-stream",
		PartSize:    partSize,
		// Send the body unsigned: minio-go's streaming signature breaks
		// some S3 fakes on multipart uploads (see notes/deps.md 1.4).
		DisableContentSha256: true,
	}
}

func (b *s3Backend) put(ctx context.Context, key string, data []byte) error {
	_, err := b.client.PutObject(ctx, b.bucket, b.prefix+key, bytes.NewReader(data), int64(len(data)), putOptions())
	if err != nil {
		return fmt.Errorf("put %s: %w", key, b.explain(err))
	}
	return nil
}

// create is a conditional PUT (If-None-Match: *, which S3 and MinIO
// check atomically, on a multipart upload when it completes): 412
// Precondition Failed means another writer's object is there. A retried
// request whose first try landed (its reply lost) is refused the same
// way, and the caller reads what is there.
func (b *s3Backend) create(ctx context.Context, key string, data []byte) error {
	opt := putOptions()
	opt.SetMatchETagExcept("*")
	_, err := b.client.PutObject(ctx, b.bucket, b.prefix+key, bytes.NewReader(data), int64(len(data)), opt)
	if err != nil {
		if r := minio.ToErrorResponse(err); r.StatusCode == http.StatusPreconditionFailed || r.Code == "PreconditionFailed" {
			return fmt.Errorf("create %s: %w: %w", key, ErrExists, err)
		}
		return fmt.Errorf("create %s: %w", key, b.explain(err))
	}
	return nil
}

func (b *s3Backend) get(ctx context.Context, key string) ([]byte, error) {
	obj, err := b.client.GetObject(ctx, b.bucket, b.prefix+key, minio.GetObjectOptions{})
	if err != nil {
		return nil, fmt.Errorf("get %s: %w", key, b.explain(err))
	}
	defer obj.Close()
	data, err := io.ReadAll(obj)
	if err != nil {
		if minio.ToErrorResponse(err).Code == "NoSuchKey" {
			return nil, fmt.Errorf("get %s: %w", key, errNotFound)
		}
		return nil, fmt.Errorf("get %s: %w", key, b.explain(err))
	}
	return data, nil
}

func (b *s3Backend) list(ctx context.Context, prefix string) ([]string, error) {
	var keys []string
	for obj := range b.client.ListObjects(ctx, b.bucket, minio.ListObjectsOptions{Prefix: b.prefix + prefix, Recursive: true}) {
		if obj.Err != nil {
			return nil, fmt.Errorf("list %s: %w", prefix, b.explain(obj.Err))
		}
		keys = append(keys, strings.TrimPrefix(obj.Key, b.prefix))
	}
	sort.Strings(keys)
	return keys, nil
}

func (b *s3Backend) ping(ctx context.Context) error {
	ok, err := b.client.BucketExists(ctx, b.bucket)
	if err != nil {
		return fmt.Errorf("ping: %w", b.explain(err))
	}
	if !ok {
		return fmt.Errorf("ping: bucket %s does not exist on %s", b.bucket, b.endpoint)
	}
	return nil
}

// caTransport trusts the system's CAs plus those in caFile.
func caTransport(caFile string) (*http.Transport, error) {
	pem, err := os.ReadFile(caFile)
	if err != nil {
		return nil, fmt.Errorf("s3 CA bundle: %w", err)
	}
	pool, err := x509.SystemCertPool()
	if err != nil {
		pool = x509.NewCertPool()
	}
	if !pool.AppendCertsFromPEM(pem) {
		return nil, fmt.Errorf("s3 CA bundle %s: no PEM certificate in it", caFile)
	}
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	return t, nil
}
