"""Issue 35: a bucket's objects as boto3 (the AWS SDK for Python) sees them, for
tests/it/s3.rs to check what stq wrote to an S3 server with a client that is not
stq's own.

usage:
  python s3_objects.py list BUCKET PREFIX          one JSON list of {"key", "size"}
  python s3_objects.py download BUCKET PREFIX DIR  every object under PREFIX/ into
                                                   DIR, by its key less PREFIX/
  python s3_objects.py copy BUCKET FROM TO         a server-side copy

S3's settings come from the environment (AWS_ENDPOINT_URL, AWS_ACCESS_KEY_ID,
AWS_SECRET_ACCESS_KEY, AWS_REGION), as stq takes them.
"""

import json
import os
import sys

import boto3

s3 = boto3.client("s3", endpoint_url=os.environ["AWS_ENDPOINT_URL"])
command, bucket = sys.argv[1], sys.argv[2]


def listed(prefix):
    objects = []
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix + "/"):
        objects.extend({"key": item["Key"], "size": item["Size"]} for item in page.get("Contents", []))
    return objects


if command == "list":
    print(json.dumps(listed(sys.argv[3])))
elif command == "download":
    prefix, directory = sys.argv[3], sys.argv[4]
    for item in listed(prefix):
        path = os.path.join(directory, item["key"][len(prefix) + 1 :])
        os.makedirs(os.path.dirname(path), exist_ok=True)
        s3.download_file(bucket, item["key"], path)
elif command == "copy":
    s3.copy_object(Bucket=bucket, Key=sys.argv[4], CopySource={"Bucket": bucket, "Key": sys.argv[3]})
else:
    sys.exit(f"unknown command {command}")
