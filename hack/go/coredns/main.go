// Command coredns is CoreDNS with only the plugins the local cluster's real nodes use: cluster
// DNS from the API (kubernetes), bound to the cluster network's address (bind), with its health
// and readiness endpoints. Upstream's main compiles every plugin in plugin.cfg (cloud DNS
// providers, etcd, ...); this list keeps the build small. The order is plugin.cfg's: CoreDNS
// runs a server block's plugins in the order of dnsserver.Directives, not of the Corefile.
package main

import (
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/coremain"

	_ "github.com/coredns/coredns/plugin/bind"
	_ "github.com/coredns/coredns/plugin/cache"
	_ "github.com/coredns/coredns/plugin/errors"
	_ "github.com/coredns/coredns/plugin/health"
	_ "github.com/coredns/coredns/plugin/kubernetes"
	_ "github.com/coredns/coredns/plugin/loadbalance"
	_ "github.com/coredns/coredns/plugin/log"
	_ "github.com/coredns/coredns/plugin/ready"
)

var directives = []string{"bind", "ready", "health", "errors", "log", "loadbalance", "cache", "kubernetes"}

func init() { dnsserver.Directives = directives }

func main() { coremain.Run() }
