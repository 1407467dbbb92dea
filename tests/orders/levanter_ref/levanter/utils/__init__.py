# Copyright 2025 The Levanter Authors
# SPDX-License-Identifier: Apache-2.0
