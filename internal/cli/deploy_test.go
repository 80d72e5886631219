package cli

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

// TestKubernetesManifests parses deploy/k8s (no cluster is reachable here)
// and checks what would break a rollout silently: every worker argument is
// a flag `retrain-worker` has, the metrics port the probes and Prometheus
// use is the one --metrics-addr opens, GPU workers ask for GPUs and poll
// the GPU queue, and every mounted volume is declared.
func TestKubernetesManifests(t *testing.T) {
	files, err := filepath.Glob("../../deploy/k8s/*.yaml")
	if err != nil || len(files) < 2 {
		t.Fatalf("manifests: %v %v", files, err)
	}
	root := NewWorkerRoot(&App{}, "retrain-worker")
	isFlag := func(name string) bool {
		return root.Flags().Lookup(name) != nil || root.PersistentFlags().Lookup(name) != nil
	}
	deployments := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for {
			var doc manifest
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", f, err)
			}
			if doc.Kind != "Deployment" {
				continue
			}
			deployments++
			name := filepath.Base(f) + ": " + doc.Metadata.Name
			spec := doc.Spec.Template.Spec
			if len(spec.Containers) != 1 {
				t.Fatalf("%s: %d containers", name, len(spec.Containers))
			}
			c := spec.Containers[0]
			args := map[string]string{}
			for _, a := range c.Args {
				key, val, _ := strings.Cut(strings.TrimPrefix(a, "--"), "=")
				if !strings.HasPrefix(a, "--") || !isFlag(key) {
					t.Errorf("%s: %q is not a retrain-worker flag", name, a)
				}
				args[key] = val
			}
			if args["pipelines"] == "" {
				t.Errorf("%s: no --pipelines: a production worker runs only its own pipelines", name)
			}
			if _, ok := args["allow-inline-specs"]; ok {
				t.Errorf("%s: a production manifest allows inline specs", name)
			}
			port := strings.TrimPrefix(args["metrics-addr"], ":")
			if port == "" || doc.Spec.Template.Metadata.Annotations["prometheus.io/port"] != port {
				t.Errorf("%s: --metrics-addr %q and the prometheus.io/port annotation disagree", name, args["metrics-addr"])
			}
			if len(c.Ports) == 0 || c.Ports[0].ContainerPort.Value != port || c.LivenessProbe.HTTPGet.Path != "/metrics" {
				t.Errorf("%s: the metrics port or liveness probe does not match --metrics-addr", name)
			}
			_, gpu := args["gpu"]
			if limit := c.Resources.Limits["nvidia.com/gpu"]; gpu != (limit != "") {
				t.Errorf("%s: --gpu %v but nvidia.com/gpu limit %q", name, gpu, limit)
			}
			if gpu && args["gpu-queue"] == "" {
				t.Errorf("%s: a GPU worker with no --gpu-queue", name)
			}
			vols := map[string]bool{}
			for _, v := range spec.Volumes {
				vols[v.Name] = true
			}
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					t.Errorf("%s: mounts undeclared volume %q", name, m.Name)
				}
			}
		}
	}
	if deployments < 2 {
		t.Errorf("%d deployments, want the CPU and the GPU worker", deployments)
	}
}

// manifest is the part of a Kubernetes object the test reads.
type manifest struct {
	Kind     string `yaml:"kind"`
	Metadata struct {
		Name string `yaml:"name"`
	} `yaml:"metadata"`
	Spec struct {
		Template struct {
			Metadata struct {
				Annotations map[string]string `yaml:"annotations"`
			} `yaml:"metadata"`
			Spec struct {
				Containers []struct {
					Args  []string `yaml:"args"`
					Ports []struct {
						ContainerPort yaml.Node `yaml:"containerPort"`
					} `yaml:"ports"`
					LivenessProbe struct {
						HTTPGet struct {
							Path string `yaml:"path"`
						} `yaml:"httpGet"`
					} `yaml:"livenessProbe"`
					Resources struct {
						Limits map[string]string `yaml:"limits"`
					} `yaml:"resources"`
					VolumeMounts []struct {
						Name string `yaml:"name"`
					} `yaml:"volumeMounts"`
				} `yaml:"containers"`
				Volumes []struct {
					Name string `yaml:"name"`
				} `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}
