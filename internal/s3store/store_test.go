package s3store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/retrain-ml/retrain/internal/devkit/s3test"
	"github.com/retrain-ml/retrain/internal/s3store"
)

func randomBytes(n int) []byte {
	b := make([]byte, n)
	rand.Read(b)
	return b
}

func TestPutGetRoundTrip(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	cfg := srv.Config("root/prefix")
	cfg.PartSize = 5 << 20
	cfg.MultipartThreshold = 5 << 20
	st, err := s3store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, size := range []int{0, 1, 64 << 10, 5<<20 + 1, 12 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			ctx := t.Context()
			want := randomBytes(size)
			key := fmt.Sprintf("objects/%d.bin", size)
			put, err := st.Put(ctx, key, bytes.NewReader(want))
			if err != nil {
				t.Fatal(err)
			}
			if put.Size != int64(size) || put.CRC32C != s3store.CRC32C(want) || put.ETag == "" {
				t.Errorf("Put = %+v, want size %d, CRC32C %s and an ETag", put, size, s3store.CRC32C(want))
			}
			got, info, err := st.GetBytes(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(got, want) {
				t.Fatalf("read back %d bytes that differ from the %d written", len(got), len(want))
			}
			if info.ETag != put.ETag || info.CRC32C != put.CRC32C || info.Size != put.Size {
				t.Errorf("Get info = %+v, Put info = %+v", info, put)
			}
			head, err := st.Head(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			if head.ETag != put.ETag || head.Size != put.Size || head.CRC32C != put.CRC32C {
				t.Errorf("Head = %+v, Put = %+v", head, put)
			}
		})
	}
	// Keys are relative to the prefix, and stored below it.
	for _, k := range srv.Keys(t) {
		if !strings.HasPrefix(k, "root/prefix/objects/") {
			t.Errorf("object stored outside the prefix: %s", k)
		}
	}
}

func TestStreamingUploadOfUnknownLength(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	cfg := srv.Config("")
	cfg.PartSize = 5 << 20
	cfg.MultipartThreshold = 5 << 20
	st, err := s3store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	want := randomBytes(11 << 20)
	pr, pw := io.Pipe()
	go func() {
		// Small writes, as an encoder would make them.
		for b := want; len(b) > 0; {
			n := min(len(b), 100_000)
			pw.Write(b[:n])
			b = b[n:]
		}
		pw.Close()
	}()
	info, err := st.Put(t.Context(), "stream.bin", pr)
	if err != nil {
		t.Fatal(err)
	}
	if info.Size != int64(len(want)) || info.CRC32C != s3store.CRC32C(want) {
		t.Errorf("Put = %+v", info)
	}
	got, _, err := st.GetBytes(t.Context(), "stream.bin")
	if err != nil || !bytes.Equal(got, want) {
		t.Fatalf("read back: %v (equal %t)", err, bytes.Equal(got, want))
	}
}

func TestConditionalWrites(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "p")
	ctx := t.Context()

	first, err := st.PutIfAbsent(ctx, "doc.json", strings.NewReader(`{"v":1}`))
	if err != nil {
		t.Fatal(err)
	}
	_, err = st.PutIfAbsent(ctx, "doc.json", strings.NewReader(`{"v":2}`))
	if !errors.Is(err, s3store.ErrExists) || !errors.Is(err, s3store.ErrPreconditionFailed) {
		t.Fatalf("second PutIfAbsent = %v, want ErrExists", err)
	}

	second, err := st.PutIfMatch(ctx, "doc.json", first.ETag, strings.NewReader(`{"v":3}`))
	if err != nil {
		t.Fatalf("PutIfMatch with the current ETag: %v", err)
	}
	_, err = st.PutIfMatch(ctx, "doc.json", first.ETag, strings.NewReader(`{"v":4}`))
	if !errors.Is(err, s3store.ErrETagMismatch) || !errors.Is(err, s3store.ErrPreconditionFailed) {
		t.Fatalf("PutIfMatch with a stale ETag = %v, want ErrETagMismatch", err)
	}
	_, err = st.PutIfMatch(ctx, "missing.json", second.ETag, strings.NewReader(`{}`))
	if !errors.Is(err, s3store.ErrNotFound) {
		t.Fatalf("PutIfMatch on a missing key = %v, want ErrNotFound", err)
	}
	got, info, err := st.GetBytes(ctx, "doc.json")
	if err != nil || string(got) != `{"v":3}` || info.ETag != second.ETag {
		t.Fatalf("after CAS: %q %+v %v", got, info, err)
	}
}

func TestConcurrentPutIfAbsentHasOneWinner(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	cfg := srv.Config("p")
	cfg.PartSize = 5 << 20
	cfg.MultipartThreshold = 5 << 20
	st, err := s3store.Open(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Small objects take the single-request path, large ones the
	// multipart one, where the condition is checked on completion.
	for _, size := range []int{100, 6 << 20} {
		t.Run(fmt.Sprint(size), func(t *testing.T) {
			key := fmt.Sprintf("claim-%d", size)
			const n = 8
			var wg sync.WaitGroup
			errs := make([]error, n)
			bodies := make([][]byte, n)
			for i := range n {
				bodies[i] = randomBytes(size)
				wg.Go(func() {
					_, errs[i] = st.PutIfAbsent(t.Context(), key, bytes.NewReader(bodies[i]))
				})
			}
			wg.Wait()
			winner := s3test.Winner(t, errs, s3store.ErrExists)
			got, _, err := st.GetBytes(t.Context(), key)
			if err != nil || !bytes.Equal(got, bodies[winner]) {
				t.Fatalf("stored object is not the winner's: %v", err)
			}
		})
	}
}

func TestListAndDeleteByPrefix(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "p")
	ctx := t.Context()
	// More than one page of 1000 keys.
	const n = 1003
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	for i := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			if _, err := st.PutBytes(ctx, fmt.Sprintf("many/%04d", i), []byte("x")); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	for _, k := range []string{"many0/sibling", "other/a/b", "other/c"} {
		if _, err := st.PutBytes(ctx, k, []byte("y")); err != nil {
			t.Fatal(err)
		}
	}

	var keys []string
	for o, err := range st.List(ctx, "many/") {
		if err != nil {
			t.Fatal(err)
		}
		keys = append(keys, o.Key)
	}
	if len(keys) != n || !slices.IsSorted(keys) || keys[0] != "many/0000" || keys[n-1] != fmt.Sprintf("many/%04d", n-1) {
		t.Fatalf("List found %d keys (%q ... ), want %d sorted", len(keys), keys[:min(3, len(keys))], n)
	}
	// Stopping early is allowed.
	for range st.List(ctx, "") {
		break
	}

	dirs, err := st.ListPrefixes(ctx, "")
	if err != nil || !slices.Equal(dirs, []string{"many", "many0", "other"}) {
		t.Errorf("ListPrefixes(\"\") = %q, %v", dirs, err)
	}
	dirs, err = st.ListPrefixes(ctx, "other/")
	if err != nil || !slices.Equal(dirs, []string{"a"}) {
		t.Errorf("ListPrefixes(other/) = %q, %v", dirs, err)
	}

	for _, bad := range []string{"", "many", "../", "/many/"} {
		if _, err := st.DeleteByPrefix(ctx, bad); !errors.Is(err, s3store.ErrInvalidKey) {
			t.Errorf("DeleteByPrefix(%q) = %v, want ErrInvalidKey", bad, err)
		}
	}
	deleted, err := st.DeleteByPrefix(ctx, "many/")
	if err != nil || deleted != n {
		t.Fatalf("DeleteByPrefix = %d, %v; want %d", deleted, err, n)
	}
	left := srv.Keys(t)
	if want := []string{"p/many0/sibling", "p/other/a/b", "p/other/c"}; !slices.Equal(left, want) {
		t.Errorf("after DeleteByPrefix the bucket holds %q, want %q", left, want)
	}
}

func TestKeysCannotEscapePrefix(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "tenant/a")
	ctx := t.Context()
	bad := []string{"../b/x", "x/../../b/x", "/abs", "a//b", "a/./b", "ctl\x01", "", "dir/"}
	for _, key := range bad {
		if _, err := st.Put(ctx, key, strings.NewReader("x")); !errors.Is(err, s3store.ErrInvalidKey) {
			t.Errorf("Put(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, err := st.PutIfAbsent(ctx, key, strings.NewReader("x")); !errors.Is(err, s3store.ErrInvalidKey) {
			t.Errorf("PutIfAbsent(%q) = %v, want ErrInvalidKey", key, err)
		}
		if _, _, err := st.Get(ctx, key); !errors.Is(err, s3store.ErrInvalidKey) {
			t.Errorf("Get(%q) = %v, want ErrInvalidKey", key, err)
		}
		if err := st.Delete(ctx, key); !errors.Is(err, s3store.ErrInvalidKey) {
			t.Errorf("Delete(%q) = %v, want ErrInvalidKey", key, err)
		}
	}
	for o, err := range st.List(ctx, "../") {
		if !errors.Is(err, s3store.ErrInvalidKey) {
			t.Errorf("List(../) yielded %+v, %v; want ErrInvalidKey", o, err)
		}
	}
	if keys := srv.Keys(t); len(keys) != 0 {
		t.Errorf("invalid keys wrote %q", keys)
	}
}

func TestOpenFailsBeforeAnyWrite(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	ctx := t.Context()

	t.Run("wrong endpoint", func(t *testing.T) {
		cfg := srv.Config("p")
		cfg.Endpoint = "http://127.0.0.1:1"
		cfg.OpenTimeout = 10 * time.Second
		_, err := s3store.Open(ctx, cfg)
		t.Log(err)
		want := `s3store: cannot reach bucket "retrain-test" at http://127.0.0.1:1: `
		if !errors.Is(err, s3store.ErrUnreachable) || !strings.HasPrefix(fmt.Sprint(err), want) {
			t.Fatalf("Open = %v, want ErrUnreachable starting %q", err, want)
		}
		if !strings.Contains(err.Error(), "connection refused") {
			t.Errorf("error does not say why: %v", err)
		}
	})
	t.Run("wrong secret", func(t *testing.T) {
		cfg := srv.Config("p")
		cfg.SecretAccessKey = "wrong-" + srv.SecretKey
		_, err := s3store.Open(ctx, cfg)
		t.Log(err)
		if !errors.Is(err, s3store.ErrAccessDenied) || !strings.Contains(fmt.Sprint(err), "access denied: check credentials") {
			t.Fatalf("Open = %v, want ErrAccessDenied saying to check credentials", err)
		}
		assertNoSecrets(t, err, cfg.SecretAccessKey, srv.SecretKey)
	})
	t.Run("unknown access key", func(t *testing.T) {
		cfg := srv.Config("p")
		cfg.AccessKeyID = "AKIAUNKNOWNKEY000000"
		_, err := s3store.Open(ctx, cfg)
		t.Log(err)
		if !errors.Is(err, s3store.ErrAccessDenied) {
			t.Fatalf("Open = %v, want ErrAccessDenied", err)
		}
		assertNoSecrets(t, err, cfg.AccessKeyID, cfg.SecretAccessKey)
	})
	t.Run("missing bucket", func(t *testing.T) {
		cfg := srv.Config("")
		cfg.URI = "s3://no-such-bucket/p"
		_, err := s3store.Open(ctx, cfg)
		t.Log(err)
		if !errors.Is(err, s3store.ErrNoSuchBucket) || !strings.Contains(err.Error(), `bucket "no-such-bucket" does not exist`) {
			t.Fatalf("Open = %v, want ErrNoSuchBucket", err)
		}
	})
	t.Run("secret without key", func(t *testing.T) {
		cfg := srv.Config("p")
		cfg.SecretAccessKey = ""
		if _, err := s3store.Open(ctx, cfg); err == nil {
			t.Fatal("Open succeeded without a secret key")
		}
	})
	if keys := srv.Keys(t); len(keys) != 0 {
		t.Errorf("failed Opens left objects: %q", keys)
	}
	if entries, _ := os.ReadDir(filepath.Join(srv.Root, srv.Bucket)); len(entries) != 0 {
		t.Errorf("failed Opens left files in the bucket directory: %v", entries)
	}
}

func TestCredentialsFromEnvironment(t *testing.T) {
	srv := s3test.Start(t)
	t.Setenv("AWS_ACCESS_KEY_ID", srv.AccessKey)
	t.Setenv("AWS_SECRET_ACCESS_KEY", srv.SecretKey)
	t.Setenv("AWS_REGION", srv.Region)
	t.Setenv("AWS_ENDPOINT_URL_S3", srv.Endpoint)
	// Keep any credentials or config of the machine out of the test.
	t.Setenv("AWS_CONFIG_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_SHARED_CREDENTIALS_FILE", filepath.Join(t.TempDir(), "none"))
	t.Setenv("AWS_PROFILE", "")
	st, err := s3store.Open(t.Context(), s3store.Config{URI: srv.URI("env"), UsePathStyle: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := st.PutBytes(t.Context(), "k", []byte("v")); err != nil {
		t.Fatal(err)
	}
	if keys := srv.Keys(t); !slices.Equal(keys, []string{"env/k"}) {
		t.Errorf("keys = %q", keys)
	}
}

func TestGetDetectsCorruption(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "p")
	ctx := t.Context()
	want := randomBytes(1 << 20)
	if _, err := st.Put(ctx, "blob.bin", bytes.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	// Flip a byte of the stored file behind the server's back, keeping
	// its size and extended attributes (checksum, ETag).
	path := filepath.Join(srv.Root, srv.Bucket, "p", "blob.bin")
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{want[1000] ^ 0xff}, 1000); err != nil {
		t.Fatal(err)
	}
	f.Close()

	_, _, err = st.GetBytes(ctx, "blob.bin")
	if !errors.Is(err, s3store.ErrChecksumMismatch) {
		t.Fatalf("GetBytes of a corrupted object = %v, want ErrChecksumMismatch", err)
	}
}

func TestSetExpirationUnsupported(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "p")
	// versitygw has no lifecycle rules; callers are told so precisely.
	err := st.SetExpiration(t.Context(), "checkpoints/", 7)
	if !errors.Is(err, s3store.ErrNotImplemented) {
		t.Fatalf("SetExpiration = %v, want ErrNotImplemented", err)
	}
	if err := st.SetExpiration(t.Context(), "../", 7); !errors.Is(err, s3store.ErrInvalidKey) {
		t.Fatalf("SetExpiration(../) = %v, want ErrInvalidKey", err)
	}
}

func TestCanceledContext(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "p")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	_, err := st.PutBytes(ctx, "k", []byte("v"))
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("Put with a canceled context = %v, want context.Canceled", err)
	}
}

func TestDeleteKeys(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "p")
	ctx := t.Context()
	for _, k := range []string{"a", "b/c", "d"} {
		if _, err := st.PutBytes(ctx, k, []byte("x")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := st.DeleteKeys(ctx, []string{"a", "../d"}); !errors.Is(err, s3store.ErrInvalidKey) {
		t.Fatalf("DeleteKeys with an invalid key = %v, want ErrInvalidKey", err)
	}
	if keys := srv.Keys(t); len(keys) != 3 {
		t.Fatalf("a rejected DeleteKeys deleted something: %q", keys)
	}
	n, err := st.DeleteKeys(ctx, []string{"a", "b/c", "missing"})
	if err != nil || n != 3 {
		t.Fatalf("DeleteKeys = %d, %v", n, err)
	}
	if keys := srv.Keys(t); !slices.Equal(keys, []string{"p/d"}) {
		t.Errorf("left %q", keys)
	}
}

func TestAbortUploads(t *testing.T) {
	t.Parallel()
	srv := s3test.Start(t)
	st := srv.Open(t, "p")
	ctx := t.Context()
	raw := srv.Client()
	// Uploads started and never finished, as by a process that died.
	for _, k := range []string{"p/ckpt/a/file", "p/ckpt/b/file", "p/keep/file"} {
		up, err := raw.CreateMultipartUpload(ctx, &s3.CreateMultipartUploadInput{Bucket: aws.String(srv.Bucket), Key: aws.String(k)})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := raw.UploadPart(ctx, &s3.UploadPartInput{Bucket: aws.String(srv.Bucket), Key: aws.String(k),
			UploadId: up.UploadId, PartNumber: aws.Int32(1), Body: bytes.NewReader(randomBytes(1000))}); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := st.AbortUploads(ctx, "ckpt/", time.Hour); err != nil || n != 0 {
		t.Fatalf("AbortUploads of recent uploads = %d, %v; want 0", n, err)
	}
	time.Sleep(1100 * time.Millisecond) // initiation times have second resolution
	if n, err := st.AbortUploads(ctx, "ckpt/", time.Second); err != nil || n != 2 {
		t.Fatalf("AbortUploads = %d, %v; want 2", n, err)
	}
	left, err := raw.ListMultipartUploads(ctx, &s3.ListMultipartUploadsInput{Bucket: aws.String(srv.Bucket)})
	if err != nil {
		t.Fatal(err)
	}
	if len(left.Uploads) != 1 || aws.ToString(left.Uploads[0].Key) != "p/keep/file" {
		t.Errorf("uploads left: %+v", left.Uploads)
	}
}
