// Command netd is kdrill's pod network daemon for kind nodes, in the role kind's kindnetd
// plays (kindnetd is not served by the Go module proxy this build uses).
//
// Every node container sits on one Docker bridge, so pod traffic between nodes needs only a
// route per remote node: its pod CIDR via its InternalIP. netd runs as a host-network
// DaemonSet and, every few seconds, reads the Node objects from the API server and
//   - writes this node's CNI configuration (ptp + host-local over the node's pod CIDR,
//     portmap for hostPort) once the controller manager has allocated that CIDR,
//   - replaces the route to every other node's pod CIDR,
//   - masquerades traffic that leaves the pod network for anything outside it,
//   - and makes the rest of the pod network unreachable, so no packet for a pod IP that does
//     not exist (any more) leaves the node by its default route.
package main

import (
	"bytes"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"time"
)

const (
	saDir     = "/var/run/secrets/kubernetes.io/serviceaccount"
	cniConfig = "/etc/cni/net.d/10-kdrill.conflist"
	interval  = 5 * time.Second
)

type nodeList struct {
	Items []struct {
		Metadata struct {
			Name string `json:"name"`
		} `json:"metadata"`
		Spec struct {
			PodCIDR string `json:"podCIDR"`
		} `json:"spec"`
		Status struct {
			Addresses []struct {
				Type    string `json:"type"`
				Address string `json:"address"`
			} `json:"addresses"`
		} `json:"status"`
	} `json:"items"`
}

func main() {
	nodeName, podSubnet := os.Getenv("NODE_NAME"), os.Getenv("POD_SUBNET")
	if nodeName == "" || podSubnet == "" {
		log.Fatal("NODE_NAME and POD_SUBNET must be set")
	}
	client, base, err := apiClient()
	if err != nil {
		log.Fatal(err)
	}
	for {
		if err := syncOnce(client, base, nodeName, podSubnet); err != nil {
			log.Printf("sync: %v", err)
		}
		time.Sleep(interval)
	}
}

func apiClient() (*http.Client, string, error) {
	ca, err := os.ReadFile(filepath.Join(saDir, "ca.crt"))
	if err != nil {
		return nil, "", err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{
		Timeout:   10 * time.Second,
		Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
	}
	base := fmt.Sprintf("https://%s:%s", os.Getenv("KUBERNETES_SERVICE_HOST"), os.Getenv("KUBERNETES_SERVICE_PORT"))
	return client, base, nil
}

func syncOnce(client *http.Client, base, nodeName, podSubnet string) error {
	token, err := os.ReadFile(filepath.Join(saDir, "token"))
	if err != nil {
		return err
	}
	req, _ := http.NewRequest(http.MethodGet, base+"/api/v1/nodes", nil)
	req.Header.Set("Authorization", "Bearer "+string(bytes.TrimSpace(token)))
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("list nodes: HTTP %d", resp.StatusCode)
	}
	var nodes nodeList
	if err := json.NewDecoder(resp.Body).Decode(&nodes); err != nil {
		return err
	}
	for _, n := range nodes.Items {
		if n.Spec.PodCIDR == "" {
			continue
		}
		if n.Metadata.Name == nodeName {
			if err := writeCNIConfig(n.Spec.PodCIDR); err != nil {
				return err
			}
			continue
		}
		for _, a := range n.Status.Addresses {
			if a.Type == "InternalIP" {
				run("ip", "route", "replace", n.Spec.PodCIDR, "via", a.Address)
			}
		}
	}
	// Anything in the pod network that no route above covers (a pod that just died, a node not
	// yet known) is unreachable here; without this the default route would carry it off the
	// node, out of the cluster, to wherever the host's network sends it.
	run("ip", "route", "replace", "unreachable", podSubnet)
	ensureMasquerade(podSubnet)
	return nil
}

func writeCNIConfig(podCIDR string) error {
	conf := fmt.Sprintf(`{
  "cniVersion": "0.4.0",
  "name": "kdrill",
  "plugins": [
    {"type": "ptp", "ipMasq": false, "mtu": 1500,
     "ipam": {"type": "host-local", "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
    {"type": "portmap", "capabilities": {"portMappings": true}}
  ]
}
`, podCIDR)
	if old, err := os.ReadFile(cniConfig); err == nil && string(old) == conf {
		return nil
	}
	// Write then rename: the container runtime must never read a half-written file.
	tmp := cniConfig + ".tmp"
	if err := os.WriteFile(tmp, []byte(conf), 0o644); err != nil {
		return err
	}
	log.Printf("writing %s for pod CIDR %s", cniConfig, podCIDR)
	return os.Rename(tmp, cniConfig)
}

func ensureMasquerade(podSubnet string) {
	rule := []string{"-t", "nat", "POSTROUTING", "-s", podSubnet, "!", "-d", podSubnet,
		"-m", "comment", "--comment", "kdrill-netd: pod traffic leaving the pod network", "-j", "MASQUERADE"}
	iptables := iptablesCommand()
	check := append([]string{"-t", "nat", "-C"}, rule[2:]...)
	if exec.Command(iptables, check...).Run() == nil {
		return
	}
	run(iptables, append([]string{"-t", "nat", "-A"}, rule[2:]...)...)
}

// iptablesCommand uses the backend the node's entrypoint chose (legacy or nft), so that netd's
// rules sit beside kube-proxy's and Docker's instead of in a table nobody else reads.
func iptablesCommand() string {
	mode, err := os.ReadFile("/run/kdrill/iptables-mode")
	if err == nil {
		switch m := string(bytes.TrimSpace(mode)); m {
		case "legacy", "nft":
			return "iptables-" + m
		}
	}
	return "iptables"
}

func run(name string, args ...string) {
	if out, err := exec.Command(name, args...).CombinedOutput(); err != nil {
		log.Printf("%s %v: %v: %s", name, args, err, out)
	}
}
