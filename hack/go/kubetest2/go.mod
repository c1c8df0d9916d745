// Builds kubetest2 with its noop deployer and exec tester at a pinned pseudo-version.
// A module (rather than `go install pkg@version`) because the proxy lists no versions of
// kubetest2, and `go install` fails looking up the module's deprecation in that list.
module kubetest2-training/hack/go/kubetest2

go 1.24.0

require (
	github.com/go-logr/logr v1.4.1 // indirect
	github.com/google/uuid v1.6.0 // indirect
	github.com/inconshreveable/mousetrap v1.1.0 // indirect
	github.com/kballard/go-shellquote v0.0.0-20180428030007-95032a82bc51 // indirect
	github.com/octago/sflags v0.2.0 // indirect
	github.com/spf13/cobra v1.8.0 // indirect
	github.com/spf13/pflag v1.0.5 // indirect
	github.com/stretchr/testify v1.12.1 // indirect
	k8s.io/klog/v2 v2.120.1 // indirect
	sigs.k8s.io/kubetest2 v0.0.0-20240309080311-0d7ca9ccb41e // indirect
)

tool (
	sigs.k8s.io/kubetest2
	sigs.k8s.io/kubetest2/kubetest2-noop
	sigs.k8s.io/kubetest2/kubetest2-tester-exec
)
