// Command kube-apiserver is the upstream Kubernetes API server, built from the
// published k8s.io/kubernetes module for Rackplane's test suite
// (scripts/kube-testbed.sh). Nothing here changes its behaviour.
package main

import (
	"os"

	_ "k8s.io/component-base/logs/json/register"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"
	_ "k8s.io/component-base/metrics/prometheus/version"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
