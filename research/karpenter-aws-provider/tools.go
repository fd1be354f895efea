//go:build tools

package kpa

import _ "github.com/aws/karpenter-provider-aws/cmd/controller"
