//! AWS emulation (moto): SQS with attributes, EventBridge PutEvents, STS AssumeRole with an
//! ExternalId and a call made with the assumed credentials.

use aws_sdk_sqs::types::{MessageAttributeValue, MessageSystemAttributeName};
use hub_tests::{aws_config, report, require, unique, AWS_ENDPOINT};

#[tokio::test]
async fn aws_sqs_send_and_receive_with_attributes() -> anyhow::Result<()> {
    require("moto", "127.0.0.1:5055");
    let sqs = aws_sdk_sqs::Client::new(&aws_config().await);
    let name = unique("hub-smoke");
    let url = sqs
        .create_queue()
        .queue_name(&name)
        .send()
        .await?
        .queue_url
        .expect("queue url");
    let attr = MessageAttributeValue::builder()
        .data_type("String")
        .string_value("loan_application.approved")
        .build()?;
    sqs.send_message()
        .queue_url(&url)
        .message_body("{\"ok\":true}")
        .message_attributes("ce-type", attr)
        .send()
        .await?;
    let got = sqs
        .receive_message()
        .queue_url(&url)
        .message_attribute_names("All")
        .message_system_attribute_names(MessageSystemAttributeName::All)
        .max_number_of_messages(1)
        .send()
        .await?;
    let msg = got.messages().first().expect("one message");
    assert_eq!(msg.body(), Some("{\"ok\":true}"));
    let ce_type = msg
        .message_attributes()
        .and_then(|a| a.get("ce-type"))
        .and_then(|v| v.string_value());
    assert_eq!(ce_type, Some("loan_application.approved"));
    report("aws", &format!("{AWS_ENDPOINT}: SQS queue {name}: sent and received a message with its ce-type attribute"));
    Ok(())
}

#[tokio::test]
async fn aws_eventbridge_put_events() -> anyhow::Result<()> {
    require("moto", "127.0.0.1:5055");
    let eb = aws_sdk_eventbridge::Client::new(&aws_config().await);
    let bus = unique("hub-smoke-bus");
    let arn = eb
        .create_event_bus()
        .name(&bus)
        .send()
        .await?
        .event_bus_arn
        .expect("bus arn");
    let entry = aws_sdk_eventbridge::types::PutEventsRequestEntry::builder()
        .event_bus_name(&arn)
        .source("studio.lerian.streaming-hub")
        .detail_type("loan_application.approved")
        .detail("{\"type\":\"loan_application.approved\"}")
        .build();
    let out = eb.put_events().entries(entry).send().await?;
    assert_eq!(out.failed_entry_count(), 0);
    let id = out
        .entries()
        .first()
        .and_then(|e| e.event_id())
        .expect("an event id");
    report(
        "aws",
        &format!("{AWS_ENDPOINT}: EventBridge PutEvents to {bus}: accepted as event {id}"),
    );
    Ok(())
}

#[tokio::test]
async fn aws_sts_assume_role_with_external_id() -> anyhow::Result<()> {
    require("moto", "127.0.0.1:5055");
    let config = aws_config().await;
    let sts = aws_sdk_sts::Client::new(&config);
    let external_id = unique("ext");
    let out = sts
        .assume_role()
        .role_arn("arn:aws:iam::123456789012:role/streaming-hub-delivery")
        .role_session_name("streaming-hub-smoke")
        .external_id(&external_id)
        .send()
        .await?;
    let creds = out.credentials().expect("temporary credentials");
    assert!(!creds.access_key_id().is_empty() && !creds.session_token().is_empty());

    // The assumed credentials work for a call: moto accepts them like any key.
    let assumed = aws_sdk_sqs::config::Credentials::new(
        creds.access_key_id(),
        creds.secret_access_key(),
        Some(creds.session_token().to_owned()),
        None,
        "assumed-role",
    );
    let sqs_config = aws_sdk_sqs::config::Builder::from(&config)
        .credentials_provider(assumed)
        .build();
    aws_sdk_sqs::Client::from_conf(sqs_config)
        .list_queues()
        .send()
        .await?;
    report("aws", &format!("{AWS_ENDPOINT}: STS AssumeRole with ExternalId returned temporary credentials; SQS ListQueues with them succeeded"));
    Ok(())
}
