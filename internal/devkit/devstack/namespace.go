package devstack

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/server/common/config"
	"go.temporal.io/server/common/searchattribute/sadefs"
	sqliteschema "go.temporal.io/server/schema/sqlite"
	"google.golang.org/protobuf/types/known/durationpb"
)

// namespaceRetention is how long closed workflows stay visible.
const namespaceRetention = 7 * 24 * time.Hour

// validateSearchAttributes applies the checks the operator API would, before
// anything is written.
func validateSearchAttributes(sas map[string]enumspb.IndexedValueType) error {
	for name, typ := range sas {
		if name == "" {
			return errors.New("search attribute with an empty name")
		}
		if sadefs.IsReserved(name) {
			return fmt.Errorf("search attribute %q is a reserved (system) name", name)
		}
		if _, ok := enumspb.IndexedValueType_name[int32(typ)]; !ok || typ == enumspb.INDEXED_VALUE_TYPE_UNSPECIFIED {
			return fmt.Errorf("search attribute %q has an invalid type %v", name, typ)
		}
	}
	return nil
}

// precreateNamespace writes the namespace, with the requested search
// attributes, straight into the database before the server starts, the way
// the Temporal CLI dev server does. Every service then loads it with its
// namespace registry at startup, whereas a namespace registered through the
// API would only appear after each service's next registry refresh.
// It is a no-op when the namespace already exists; search attributes missing
// from an existing namespace are added by ensureSearchAttributes once the
// server runs.
func precreateNamespace(cfg *config.SQL, name string, sas map[string]enumspb.IndexedValueType) error {
	ns, err := sqliteschema.NewNamespaceConfig(clusterName, name, false, sas)
	if err != nil {
		return fmt.Errorf("namespace %q: %w", name, err)
	}
	ns.Detail.Config.Retention = durationpb.New(namespaceRetention)
	if err := sqliteschema.CreateNamespaces(cfg, ns); err != nil {
		return fmt.Errorf("create namespace %q: %w", name, err)
	}
	return nil
}

// ensureSearchAttributes registers the search attributes the namespace lacks
// through the operator API (idempotent: present ones are left alone, a name
// registered with another type is an error). This is the path taken when a
// later start asks for attributes the stored namespace does not have yet.
func ensureSearchAttributes(ctx context.Context, c client.Client, namespace string, want map[string]enumspb.IndexedValueType, refresh time.Duration) error {
	if len(want) == 0 {
		return nil
	}
	missing, err := missingSearchAttributes(ctx, c, namespace, want)
	if err != nil {
		return err
	}
	if len(missing) == 0 {
		return nil
	}
	if _, err := c.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
		Namespace:        namespace,
		SearchAttributes: missing,
	}); err != nil {
		return fmt.Errorf("add search attributes %v: %w", slices.Sorted(maps.Keys(missing)), err)
	}

	// The alias is stored in the namespace record; each service sees it after
	// its namespace registry refreshes. Wait until the frontend does, then
	// one more refresh period so history and matching have caught up too.
	for {
		missing, err = missingSearchAttributes(ctx, c, namespace, want)
		if err != nil {
			return err
		}
		if len(missing) == 0 {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("search attributes %v not visible yet: %w", slices.Sorted(maps.Keys(missing)), ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(refresh):
	}
	return nil
}

func missingSearchAttributes(ctx context.Context, c client.Client, namespace string, want map[string]enumspb.IndexedValueType) (map[string]enumspb.IndexedValueType, error) {
	resp, err := c.OperatorService().ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: namespace})
	if err != nil {
		return nil, fmt.Errorf("list search attributes of namespace %q: %w", namespace, err)
	}
	missing := map[string]enumspb.IndexedValueType{}
	for name, typ := range want {
		got, ok := resp.GetCustomAttributes()[name]
		switch {
		case !ok:
			missing[name] = typ
		case got != typ:
			return nil, fmt.Errorf("search attribute %q already exists in namespace %q as %v, not %v", name, namespace, got, typ)
		}
	}
	return missing, nil
}

// waitForNamespace polls until the frontend serves the namespace: the server
// answers before its registries are warm, and a worker that polls too early
// gets NamespaceNotFound.
func waitForNamespace(ctx context.Context, c client.Client, namespace string) error {
	for {
		_, err := c.WorkflowService().DescribeNamespace(ctx, describeNamespaceRequest(namespace))
		if err == nil {
			return nil
		}
		var notFound *serviceerror.NamespaceNotFound
		if !errors.As(err, &notFound) && !isUnavailable(err) {
			return fmt.Errorf("describe namespace %q: %w", namespace, err)
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %q not served yet: %w (last error: %v)", namespace, ctx.Err(), err)
		case <-time.After(50 * time.Millisecond):
		}
	}
}
