#!/usr/bin/env bash
# Run by test_kubetest2_image.py (SCRIPT); see the comment there.
set -u
sa=/var/run/secrets/kubernetes.io/serviceaccount
cat > /tmp/kubeconfig <<END
apiVersion: v1
kind: Config
clusters:
- name: in-cluster
  cluster: {server: "https://$KUBERNETES_SERVICE_HOST:$KUBERNETES_SERVICE_PORT", certificate-authority: $sa/ca.crt}
users: [{name: sa, user: {tokenFile: $sa/token}}]
contexts: [{name: sa, context: {cluster: in-cluster, user: sa}}]
current-context: sa
END
kubetest2 noop --kubeconfig=/tmp/kubeconfig --artifacts=/logs/artifacts --test=exec -- \
  e2e-nvidia-training --test.v --nodeType=kwok-cpu --test.run='^TestMNISTTraining$'
echo $? > /logs/exit-code
while [ ! -e /logs/copied ]; do sleep 1; done
exit "$(cat /logs/exit-code)"
