package runs

import (
	"context"
	"fmt"
	"strings"

	namespacepb "go.temporal.io/api/namespace/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
)

// UIAddressKey is the namespace data entry holding the base URL of the
// Web UI that shows the namespace. `retrain dev` publishes its own UI
// there on every start, so `retrain run` links to the port actually in
// use; on a shared cluster an operator can set it once:
//
//	temporal operator namespace update --namespace NS --data retrain.ui-address=https://temporal.example.com
const UIAddressKey = "retrain.ui-address"

// PublishUIAddress records address as the namespace's Web UI; "" says
// there is none (a headless dev stack).
func PublishUIAddress(ctx context.Context, c client.Client, namespace, address string) error {
	_, err := c.WorkflowService().UpdateNamespace(ctx, &workflowservice.UpdateNamespaceRequest{
		Namespace:  namespace,
		UpdateInfo: &namespacepb.UpdateNamespaceInfo{Data: map[string]string{UIAddressKey: address}},
	})
	if err != nil {
		return fmt.Errorf("publish the Web UI address in namespace %s: %w", namespace, err)
	}
	return nil
}

// UIAddress returns the Web UI base URL the namespace publishes. ok is
// false when it publishes nothing; ok with "" means it has no UI.
func UIAddress(ctx context.Context, c client.Client, namespace string) (address string, ok bool, err error) {
	desc, err := c.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: namespace})
	if err != nil {
		return "", false, fmt.Errorf("describe namespace %s: %w", namespace, err)
	}
	address, ok = desc.GetNamespaceInfo().GetData()[UIAddressKey]
	return strings.TrimRight(address, "/"), ok, nil
}
